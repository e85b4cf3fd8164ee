"""Plain range checks on config values, declared once; the resolver walks the table.

Each row names a key, its bound and the value a fix suggests. Relations between keys
(min_scale <= initial_scale, warmup in epochs *or* steps, a batch that divides over the
replicas) are rules in `launcher.plan.resolve`, which need the Plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launcher.config.errors import Violation

# bound -> (holds?, what the error says is expected)
# (NaN fails every comparison; inf is refused where a bound is open-ended.)
CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    ">= 1": (lambda v: math.isfinite(v) and v >= 1, "an integer >= 1"),
    ">= 0": (lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0"),
    ">= 4": (lambda v: math.isfinite(v) and v >= 4, "an integer >= 4"),
    "> 0": (lambda v: math.isfinite(v) and v > 0, "a finite number > 0"),
    "(0, 1)": (lambda v: 0 < v < 1, "a fraction in (0, 1)"),
    "(0, 1]": (lambda v: 0 < v <= 1, "a fraction in (0, 1]"),
    "[0, 1)": (lambda v: 0 <= v < 1, "a fraction in [0, 1)"),
}


@dataclass(frozen=True)
class Bound:
    """`key` must satisfy `bound`; `fix` is the value suggested; `when` limits the check."""

    key: str
    bound: str
    fix: Any
    when: Callable[[Any], bool] | None = None

    def violation(self, cfg) -> Violation | None:
        value = lookup(cfg, self.key)
        if value is ABSENT or (self.when is not None and not self.when(cfg)):
            return None
        holds, expected = CHECKS[self.bound]
        if holds(value):
            return None
        return Violation(self.key, value, expected, f"{self.key}={self.fix}")


ABSENT = object()


def lookup(cfg, dotted: str) -> Any:
    """`cfg.a.b` for "a.b"; ABSENT when a model or dataset has no such field."""
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part, ABSENT)
        if node is ABSENT:
            return ABSENT
    return node


def _checkpointing(cfg) -> bool:
    return bool(cfg.checkpoint.enabled)


BOUNDS: tuple[Bound, ...] = (
    Bound("seed", ">= 0", 0),
    Bound("model.dropout", "[0, 1)", 0.0),
    # Keys of one model or dataset option (skipped when the chosen option has no such key).
    Bound("model.kernel_size", ">= 1", 3),
    Bound("model.dense_units", ">= 1", 64),
    Bound("model.min_input_size", ">= 1", 32),
    Bound("model.embed_dim", ">= 1", 32),
    Bound("model.num_heads", ">= 1", 2),
    Bound("model.ff_dim", ">= 1", 64),
    Bound("model.num_layers", ">= 1", 2),
    Bound("model.patch_size", ">= 0", 0),
    Bound("dataset.seed", ">= 0", 0),
    Bound("dataset.num_classes", ">= 0", 0),
    Bound("dataset.validation_split", "(0, 1)", 0.2),
    Bound("dataset.shuffle_seed", ">= 0", 0),
    Bound("dataset.shuffle_buffer", ">= 1", 10_000),
    Bound("dataset.limit", ">= 0", 0),
    Bound("strategy.devices", ">= 0", 0),
    Bound("strategy.local_workers", ">= 0", 2),
    Bound("strategy.task_index", ">= 0", 0),
    Bound("strategy.port", ">= 1", 12345),
    Bound("strategy.connect_timeout", "> 0", 300),
    Bound("loss_scale.initial_scale", "> 0", 32768),
    Bound("loss_scale.growth_interval", ">= 1", 2000),
    Bound("loss_scale.min_scale", "> 0", 1),
    Bound("loss_scale.value", "> 0", 1024),
    Bound("scaling.batch_size", ">= 1", 64),
    Bound("scaling.reference_batch", ">= 1", 64),
    Bound("scaling.warmup_epochs", ">= 0", 0),
    Bound("scaling.warmup_steps", ">= 0", 0),
    Bound("optimizer.learning_rate", "> 0", 0.001),
    Bound("optimizer.momentum", "[0, 1)", 0.9),
    Bound("optimizer.weight_decay", ">= 0", 0.0),
    Bound("optimizer.clipnorm", ">= 0", 0.0),
    Bound("optimizer.global_clipnorm", ">= 0", 0.0),
    Bound("optimizer.ema_momentum", "[0, 1)", 0.99),
    Bound("optimizer.gradient_accumulation_steps", ">= 1", 1),
    Bound("train.epochs", ">= 1", 5),
    Bound("train.steps_per_execution", ">= 1", 16),
    Bound("train.max_steps_per_epoch", ">= 0", 0),
    Bound("train.max_validation_steps", ">= 0", 0),
    Bound("train.limit_fraction", "(0, 1]", 1.0),
    Bound("train.collapse_steps", ">= 0", 20),
    Bound("doctor.steps", ">= 4", 60),
    Bound("doctor.tolerance", "> 0", 0.5),
    Bound("doctor.max_fixes", ">= 1", 4),
    Bound("train.early_stopping.patience", ">= 0", 3),
    Bound("train.reduce_lr_on_plateau.patience", ">= 0", 2),
    Bound("train.reduce_lr_on_plateau.factor", "(0, 1)", 0.5),
    Bound("train.profile.steps", ">= 0", 10),
    Bound("train.profile.skip_steps", ">= 0", 10),
    Bound("checkpoint.interval_epochs", ">= 0", 1),
    Bound("checkpoint.interval_steps", ">= 0", 0),
    Bound("checkpoint.max_to_keep", ">= 1", 3, when=_checkpointing),
    Bound("tracking.outage_wait", ">= 0", 120),
    Bound("tracking.step_metrics_every", ">= 0", 10),
    Bound("tracking.system_metrics_interval", "> 0", 10),
)


def out_of_bounds(cfg) -> list[Violation]:
    """Every value outside its bound, in table order."""
    found = (bound.violation(cfg) for bound in BOUNDS)
    return [v for v in found if v is not None]
