"""What keeps the numbers sound: non-finite steps, determinism, gradient clipping and the weights' average
(the last two as the launcher applies them, after the all-reduce, not as Keras would).

The same concept one level down: `launcher.train.numerics` counts in the step and stops a run as
this rule decides.
"""

from __future__ import annotations

from launcher.config.schema import Config, OnNonfinite
from launcher.plan.decisions import NumericsPlan, StrategyPlan
from launcher.plan.rules.findings import Findings


def decide_numerics(config: Config, found: Findings, strategy: StrategyPlan) -> NumericsPlan:
    tr, opt = config.train, config.optimizer
    collapse = (
        f"; stop after {tr.collapse_steps} consecutive skipped steps or steps at the minimum loss scale"
        if tr.collapse_steps > 0
        else "; train.collapse_steps=0: skipped steps never stop the run"
    )
    if tr.on_nonfinite == OnNonfinite.stop:
        on_nonfinite = ("stop", "a NaN/inf loss stops the run at that step, with a diagnosis" + collapse)
    else:
        on_nonfinite = ("skip", "a NaN/inf step is skipped by the loss-scale optimizer" + collapse)
    where = (
        "after the all-reduce, on the unscaled gradient of the global batch (Keras would clip each of the "
        f"{strategy.replicas} replicas' partial gradients before summing them)"
        if strategy.replicas > 1
        else "on the unscaled gradient, after the (one-replica) reduction"
    )
    return NumericsPlan.of(
        on_nonfinite=on_nonfinite,
        determinism=(True, "requested: op determinism on, seeded; slower kernels") if config.deterministic else None,
        clipnorm=(opt.clipnorm, f"each variable's gradient clipped to this L2 norm {where}")
        if opt.clipnorm > 0
        else None,
        global_clipnorm=(opt.global_clipnorm, f"the whole gradient clipped to this L2 norm {where}")
        if opt.global_clipnorm > 0
        else None,
        ema_momentum=(
            opt.ema_momentum,
            "the weights' moving average (this momentum per step) is what validation, "
            "the best model and the exported model use; checkpoints keep both, so a resume continues both",
        )
        if opt.use_ema
        else None,
    )
