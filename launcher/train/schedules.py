"""Learning-rate schedule: linear warmup to the planned rate, then constant or cosine."""

from __future__ import annotations

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="launcher")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, peak: float, warmup_steps: int, total_steps: int, decay: str = "constant"):
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = max(int(total_steps), 1)
        self.decay = decay

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warm = max(self.warmup_steps, 1)
        warmup = self.peak * ops.minimum((step + 1.0) / warm, 1.0)
        if self.decay == "cosine":
            span = max(self.total_steps - self.warmup_steps, 1)
            progress = ops.clip((step - self.warmup_steps) / span, 0.0, 1.0)
            after = self.peak * 0.5 * (1.0 + ops.cos(math.pi * progress))
        else:
            after = ops.convert_to_tensor(self.peak, "float32")
        if self.warmup_steps <= 0:
            return after
        return ops.where(step < self.warmup_steps, warmup, after)

    def get_config(self):
        return {
            "peak": self.peak,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "decay": self.decay,
        }


def learning_rate(plan, optimizer_cfg):
    """A float when nothing varies (so ReduceLROnPlateau can set it), else a schedule."""
    decay = optimizer_cfg.schedule.value
    warmup = plan.schedule.warmup_steps
    if decay == "constant" and not warmup:
        return plan.learning_rate.peak
    return WarmupSchedule(plan.learning_rate.peak, warmup, plan.schedule.total_steps, decay)
