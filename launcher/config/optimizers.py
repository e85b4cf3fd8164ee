"""The optimizers and learning-rate schedules a config names: what each is, what the launcher fills in.

Keras's own set by name (`optimizer.name=lion`, `optimizer.schedule=cosine_restarts`), yours by import path
(`module.path:Name`). Each entry says which Keras class it is, whether the launcher has a fused TensorFlow
update for it, and which arguments the launcher owns (so `optimizer.params` cannot set them behind its back).
TensorFlow-free: the resolver reads these tables; `launcher.train.optimizers` makes the objects (the same
concept one level down).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OptimizerKind:
    name: str
    keras_class: str  # in keras.optimizers
    fused_kernel: str | None = None  # the TensorFlow apply op the launcher's fused update uses, if it has one
    momentum: bool = False  # takes optimizer.momentum
    default_weight_decay: float | None = None  # what optimizer.weight_decay=0 means (None: no decay)
    not_under_xla: str | None = None  # why XLA breaks its update (xla=auto then stays off), if it does


def xla_breaks(name: str) -> str | None:
    """Why XLA breaks this optimizer's update (`OptimizerKind.not_under_xla`); None for one it does not, or yours."""
    kind = OPTIMIZERS.get(str(name).strip())
    return kind.not_under_xla if kind else None


OPTIMIZERS = {
    kind.name: kind
    for kind in (
        OptimizerKind("adam", "Adam", "ResourceApplyAdam"),
        OptimizerKind("adamw", "AdamW", "ResourceApplyAdam after Keras's decoupled weight decay", False, 0.004),
        OptimizerKind("sgd", "SGD", "ResourceApplyKerasMomentum (ResourceApplyGradientDescent without momentum)", True),
        OptimizerKind("rmsprop", "RMSprop"),
        OptimizerKind("nadam", "Nadam"),
        OptimizerKind("adamax", "Adamax"),
        OptimizerKind("adagrad", "Adagrad"),
        OptimizerKind("adadelta", "Adadelta"),
        OptimizerKind(
            "adafactor",
            "Adafactor",
            not_under_xla=(
                "Keras's Adafactor divides by sqrt of its factored second moment with no epsilon: under XLA "
                "(denormals flushed to zero) a weight whose gradient is always 0 (a dead input) updates by 0/0 = NaN "
                "(measured on an AMD EPYC without AMX: the digits MLP is NaN in its first epoch, stock model.fit with "
                "jit_compile=True too)"
            ),
        ),
        OptimizerKind("ftrl", "Ftrl"),
        OptimizerKind("lion", "Lion"),
        OptimizerKind("lamb", "Lamb"),
    )
}

# Optimizer arguments the launcher sets from its own keys: optimizer.params naming one is refused with the key.
OWNED_OPTIMIZER_ARGUMENTS = {
    "learning_rate": "optimizer.learning_rate (and optimizer.schedule)",
    "clipnorm": "optimizer.clipnorm (clipped after the all-reduce)",
    "global_clipnorm": "optimizer.global_clipnorm (clipped after the all-reduce)",
    "clipvalue": "optimizer.clipnorm or optimizer.global_clipnorm",
    "use_ema": "optimizer.use_ema",
    "ema_momentum": "optimizer.ema_momentum",
    "weight_decay": "optimizer.weight_decay",
    "gradient_accumulation_steps": "optimizer.gradient_accumulation_steps (works under every strategy)",
    "loss_scale_factor": "loss_scale=fixed loss_scale.value=<scale>",
}


@dataclass(frozen=True)
class ScheduleKind:
    name: str
    keras_class: str | None  # in keras.optimizers.schedules; None: the planned rate, constant
    # The argument the launcher fills with the steps after warmup (None: it fills none).
    decay_argument: str | None = None
    # The argument the launcher fills with the steps of one epoch, unless given.
    epoch_argument: str | None = None
    needs: tuple[str, ...] = ()  # arguments optimizer.schedule_params must give
    peak: bool = True  # the launcher fills initial_learning_rate with the planned peak rate

    @property
    def description(self) -> str:
        return f"keras.optimizers.schedules.{self.keras_class}" if self.keras_class else "the planned rate throughout"


SCHEDULES = {
    kind.name: kind
    for kind in (
        ScheduleKind("constant", None),
        ScheduleKind("cosine", "CosineDecay", decay_argument="decay_steps"),
        ScheduleKind("cosine_restarts", "CosineDecayRestarts", epoch_argument="first_decay_steps"),
        ScheduleKind("exponential", "ExponentialDecay", decay_argument="decay_steps", needs=("decay_rate",)),
        ScheduleKind("inverse_time", "InverseTimeDecay", decay_argument="decay_steps", needs=("decay_rate",)),
        ScheduleKind("polynomial", "PolynomialDecay", decay_argument="decay_steps"),
        ScheduleKind("piecewise", "PiecewiseConstantDecay", needs=("boundaries", "values"), peak=False),
    )
}
