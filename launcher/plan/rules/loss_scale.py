"""Loss scaling for precisions whose gradients underflow, and which loss-scale optimizer applies it.

The same concept one level down: `launcher.train.loss_scale` builds what this rule decides.
"""

from __future__ import annotations

import math

from launcher.config.precisions import PRECISIONS
from launcher.config.schema import Config, LossScaleImpl, LossScaleMode, OnNonfinite
from launcher.plan.decisions import LossScalePlan, PrecisionPlan, StepPlan, StrategyPlan
from launcher.plan.rules.findings import Findings


def decide_loss_scale(
    config: Config, found: Findings, precision: PrecisionPlan, strategy: StrategyPlan, step: StepPlan
) -> LossScalePlan:
    ls = config.loss_scale
    mode = ls.mode
    if not PRECISIONS[precision.name].needs_loss_scaling:
        return _unscaled(config, found, precision.name)
    if mode == LossScaleMode.none:
        found.refuse(
            "loss_scale",
            "none",
            f"dynamic or fixed with precision={precision.name} ({precision.compute_dtype} gradients underflow to zero "
            "without scaling)",
            "loss_scale=dynamic (or loss_scale=auto)",
        )
        return LossScalePlan.of(mode=("none", "refused"), optimizer=("none", "refused"))
    if mode == LossScaleMode.fixed:
        if ls.value > 0 and not math.log2(ls.value).is_integer():
            found.warn(f"loss_scale.value={ls.value:g} is not a power of 2: scaling then rounds gradients.")
        decided = {"mode": ("fixed", f"requested: scale stays at {ls.value:g}"), "value": (ls.value, "requested")}
    else:
        _check_dynamic(ls, found)
        why = "requested" if mode == LossScaleMode.dynamic else f"loss_scale=auto: {precision.name} needs loss scaling"
        decided = {"mode": ("dynamic", why)}
    optimizer = _choose_optimizer(config, found, strategy.replicas, step.xla, fixed=mode == LossScaleMode.fixed)
    return LossScalePlan.of(**decided, optimizer=optimizer)


def _unscaled(config: Config, found: Findings, precision: str) -> LossScalePlan:
    mode = config.loss_scale.mode
    if mode in (LossScaleMode.dynamic, LossScaleMode.fixed):
        found.warn(
            f"loss_scale={mode.value} is unused with precision={precision}: only float16 "
            "gradients underflow. Drop the override (loss_scale=auto)."
        )
    if config.train.on_nonfinite == OnNonfinite.skip:
        # Only a loss-scale optimizer skips a step; at scale 1 it changes nothing else.
        return LossScalePlan.of(
            mode=("fixed", "train.on_nonfinite=skip: a fixed scale of 1 (no scaling)"),
            value=(1.0, "scaling by 1 leaves the gradients as they are"),
            optimizer=("replica_safe", "train.on_nonfinite=skip: it skips a non-finite step on every replica together"),
        )
    return LossScalePlan.of(
        mode=("none", f"{precision} gradients do not underflow"), optimizer=("none", "no loss scaling")
    )


def _check_dynamic(ls, found: Findings) -> None:
    if not ls.min_scale <= ls.initial_scale <= ls.max_scale:
        found.refuse(
            "loss_scale.initial_scale",
            ls.initial_scale,
            f"min_scale ({ls.min_scale:g}) <= initial_scale <= max_scale ({ls.max_scale:g})",
            "loss_scale.initial_scale=32768 loss_scale.min_scale=1 loss_scale.max_scale=16777216",
        )


def _choose_optimizer(config: Config, found: Findings, replicas: int, xla: bool, fixed: bool) -> tuple[str, str]:
    impl = config.loss_scale.implementation
    if impl == LossScaleImpl.stock:
        _check_stock(found, replicas, xla, fixed)
        return "stock", "requested: keras.optimizers.LossScaleOptimizer"
    if impl == LossScaleImpl.replica_safe:
        return "replica_safe", "requested"
    if replicas > 1:
        crash = " the stock one crashes under XLA (merge_call inside the compiled step, keras#21366) and" if xla else ""
        return "replica_safe", (
            f"float16 with {replicas} replicas:{crash} checks overflow on the first replica's un-reduced "
            "gradients only; replica_safe all-reduces first, so every replica skips or applies together"
        )
    if fixed:
        return "replica_safe", "fixed mode: Keras 3's LossScaleOptimizer is dynamic only"
    return "stock", "one replica: keras.optimizers.LossScaleOptimizer works"


def _check_stock(found: Findings, replicas: int, xla: bool, fixed: bool) -> None:
    if fixed:
        found.refuse(
            "loss_scale.implementation",
            "stock",
            "replica_safe or auto with loss_scale=fixed (Keras 3's LossScaleOptimizer has no fixed mode)",
            "loss_scale.implementation=auto",
        )
    elif replicas > 1 and xla:
        found.refuse(
            "loss_scale.implementation",
            "stock",
            "replica_safe or auto with float16 + a multi-replica strategy + XLA (the stock "
            "LossScaleOptimizer crashes there: merge_call inside a compiled step, keras#21366)",
            "loss_scale.implementation=auto, or xla=false",
        )
    elif replicas > 1:
        found.warn(
            "loss_scale.implementation=stock with several replicas: Keras checks for overflow on "
            "the first replica's gradients only, so another replica's inf/nan reaches the weights."
        )
