"""train.unfreeze_fresh_optimizer: the optimizer starts afresh at the unfreeze, as keras.io's fine-tuning recompiles
with a new optimizer, while the schedule, the checkpoint and a resume go on as before.

Not a new optimizer object: the compiled step, the checkpoint and the loss-scale wrapper hold this one. Its state
variables (step count, slots, EMA averages) are set to what a new optimizer of the same config starts with; a
learning rate held in a variable (ReduceLROnPlateau's) is kept. Adam's bias correction counts the optimizer's own
steps, so zeroed slots need a zeroed count too (zeroed slots at step 2000 would make the first updates ~3-6x too
large); the learning-rate schedule, which reads the same count, is then read `unfreeze_step` steps on.
"""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="launcher")
class ContinuedSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`base` read `offset` steps on: an optimizer whose step count restarted at global step `offset`."""

    def __init__(self, base, offset: int):
        self.base = base
        self.offset = int(offset)

    def __call__(self, step):
        return self.base(ops.cast(step, "int64") + self.offset)

    def get_config(self):
        return {"base": keras.saving.serialize_keras_object(self.base), "offset": self.offset}

    @classmethod
    def from_config(cls, config):
        return cls(keras.saving.deserialize_keras_object(config["base"]), config["offset"])


def inner_optimizer(optimizer):
    """The optimizer that holds the slots and the schedule (inside a loss-scale optimizer, if any)."""
    while hasattr(optimizer, "inner_optimizer"):
        optimizer = optimizer.inner_optimizer
    return optimizer


def continue_schedule(optimizer, offset: int) -> None:
    """Read the optimizer's schedule `offset` steps on (once; a constant rate needs nothing). Before the step is
    traced again: the traced step reads the schedule object it was traced with."""
    inner = inner_optimizer(optimizer)
    schedule = inner._learning_rate  # Keras keeps the schedule (or the rate's variable) there
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule) and not isinstance(
        schedule, ContinuedSchedule
    ):
        inner._learning_rate = ContinuedSchedule(schedule, offset)


def restart(optimizer) -> None:
    """Set every state variable of the optimizer to a new one's start, the rate's variable aside."""
    inner = inner_optimizer(optimizer)
    new = type(inner).from_config(inner.get_config())
    new.build(inner._trainable_variables)
    kept = inner._learning_rate if isinstance(inner._learning_rate, keras.Variable) else None
    mine, fresh = inner.variables, new.variables
    if [tuple(v.shape) for v in mine] != [tuple(v.shape) for v in fresh]:
        raise RuntimeError(f"a new {type(inner).__name__} holds other state variables than the trained one")
    for variable, start in zip(mine, fresh, strict=True):
        if variable is not kept:
            variable.assign(ops.convert_to_numpy(start.value))
