"""Learning-rate schedule: linear warmup to where the configured schedule starts, then that schedule.

The schedule after warmup is Keras's (`keras.optimizers.schedules`, by name) or yours (by import path), made
with the arguments the Plan decided (`SchedulePlan.lr_schedule_arguments`) and counted from the end of warmup.
"""

from __future__ import annotations

import keras
from keras import ops

from launcher.config.imports import import_component, is_import_path
from launcher.config.optimizers import SCHEDULES


@keras.saving.register_keras_serializable(package="launcher")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`warmup_steps` of linear warmup to `after(0)` (else to `peak`), then `after(step - warmup_steps)`."""

    def __init__(self, peak: float, warmup_steps: int, after=None):
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.after = after

    def __call__(self, step):
        since = ops.maximum(ops.cast(step, "int64") - self.warmup_steps, 0)
        after = (
            ops.cast(self.after(since), "float32")
            if self.after is not None
            else ops.convert_to_tensor(self.peak, "float32")
        )
        if self.warmup_steps <= 0:
            return after
        target = ops.cast(self.after(0), "float32") if self.after is not None else self.peak
        progress = ops.minimum((ops.cast(step, "float32") + 1.0) / self.warmup_steps, 1.0)
        return ops.where(ops.cast(step, "int64") < self.warmup_steps, target * progress, after)

    def get_config(self):
        return {
            "peak": self.peak,
            "warmup_steps": self.warmup_steps,
            "after": keras.saving.serialize_keras_object(self.after) if self.after is not None else None,
        }

    @classmethod
    def from_config(cls, config):
        after = config.get("after")
        return cls(
            config["peak"], config["warmup_steps"], keras.saving.deserialize_keras_object(after) if after else None
        )


@keras.saving.register_keras_serializable(package="launcher")
class UnfreezeSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`base` (a rate or a schedule) until global step `boundary`, then `factor` times it (train.unfreeze_*)."""

    def __init__(self, base, boundary: int, factor: float):
        self.base = base
        self.boundary = int(boundary)
        self.factor = float(factor)

    def __call__(self, step):
        rate = self.base(step) if callable(self.base) else ops.convert_to_tensor(self.base, "float32")
        rate = ops.cast(rate, "float32")
        return ops.where(ops.cast(step, "int64") >= self.boundary, rate * self.factor, rate)

    def get_config(self):
        base = keras.saving.serialize_keras_object(self.base) if callable(self.base) else self.base
        return {"base": base, "boundary": self.boundary, "factor": self.factor}

    @classmethod
    def from_config(cls, config):
        base = config["base"]
        base = keras.saving.deserialize_keras_object(base) if isinstance(base, dict) else base
        return cls(base, config["boundary"], config["factor"])


def schedule_class(name: str):
    """The schedule class (or function) a config names: Keras's by table name, yours by import path."""
    if is_import_path(name):
        return import_component("optimizer.schedule", name, "a learning-rate schedule (class or function)")
    return getattr(keras.optimizers.schedules, SCHEDULES[name].keras_class)


def learning_rate(plan):
    """A float when nothing varies (so ReduceLROnPlateau can set it), else a schedule."""
    arguments = plan.schedule.lr_schedule_arguments
    warmup = plan.schedule.warmup_steps
    if arguments is None and not warmup:
        rate = plan.learning_rate.peak
    else:
        after = schedule_class(plan.optimizer.schedule)(**arguments) if arguments is not None else None
        rate = WarmupSchedule(plan.learning_rate.peak, warmup, after)
    factor = plan.schedule.unfreeze_lr_factor
    return UnfreezeSchedule(rate, plan.schedule.unfreeze_step, factor) if factor is not None else rate
