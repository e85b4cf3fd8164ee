"""Global, per-replica and micro batches, and the learning rate scaled with the global batch: one rule."""

from __future__ import annotations

import math

from launcher.config.schema import BatchRule, Config, LrRule
from launcher.plan.decisions import BatchPlan, LearningRatePlan, StepPlan, StrategyPlan
from launcher.plan.rules.findings import Findings


def decide_batch(config: Config, found: Findings, strategy: StrategyPlan, step: StepPlan) -> BatchPlan:
    sc, replicas = config.scaling, strategy.replicas
    size = max(sc.batch_size, 1)  # below 1: reported by the bounds table
    if sc.batch_rule == BatchRule["per_replica"]:
        global_batch = (size * replicas, f"batch_rule=per_replica: {size} x {replicas} replica(s)")
        per_replica = (size, "requested")
        _warn_if_a_sweep_varies_the_batch_unasked(config.sweep.varies, size, replicas, found)
    else:
        global_batch = (size, "batch_rule=global: requested")
        per_replica = (size // replicas, f"{size} / {replicas} replica(s)")
        if size % replicas:
            lower = max(replicas, size // replicas * replicas)
            found.refuse(
                "scaling.batch_size",
                size,
                f"a multiple of the {replicas} replicas with batch_rule=global",
                f"scaling.batch_size={lower} or {lower + replicas}, or scaling=per_replica",
            )
    accumulate = config.optimizer.gradient_accumulation_steps
    if accumulate > 1:
        micro = per_replica[0]
        return BatchPlan.of(
            global_batch=(
                global_batch[0] * accumulate,
                f"effective: {accumulate} accumulated micro-batches x {global_batch[0]}",
            ),
            per_replica=(micro * accumulate, f"{accumulate} micro-batches of {micro} per step"),
            micro=(micro, "scaling.batch_size per replica, one forward/backward at a time"),
            accumulation=(
                accumulate,
                "the replica step sums the micro-batches' gradients and applies once, under "
                "every strategy, precision and XLA (Keras's own accumulator merges inside a cond under "
                "tf.distribute, keras#16633)",
            ),
            drop_remainder=(True, "gradient accumulation: every step needs whole micro-batches"),
        )
    if replicas > 1:
        drop = (True, "several replicas: every step gets full, equal per-replica batches")
    elif step.xla:
        drop = (True, "XLA: a ragged last batch would trigger a recompile")
    else:
        drop = (False, "one replica without XLA: the ragged last batch is trained on")
    return BatchPlan.of(
        global_batch=global_batch,
        per_replica=per_replica,
        accumulation=(1, "one forward/backward per step"),
        drop_remainder=drop,
    )


def _warn_if_a_sweep_varies_the_batch_unasked(varies: list[str], size: int, replicas: int, found: Findings) -> None:
    """A sweep over strategies under batch_rule=per_replica runs each job at batch_size x its replicas: jobs then
    differ in global batch, steps and learning rate though the sweep varies none of them."""
    keys = [str(k) for k in varies]
    strategies = any(k == "strategy" or k.startswith("strategy.") for k in keys)
    batch = any(k == "scaling" or k.startswith("scaling.batch") for k in keys)
    if strategies and not batch:
        found.warn(
            f"this sweep varies the strategy under scaling.batch_rule=per_replica: each job's global batch is "
            f"scaling.batch_size x its replicas (here {size} x {replicas} = {size * replicas}), so the jobs also "
            "differ in global batch, steps per epoch and what they learn per step. To compare strategies at one "
            "global batch: scaling.batch_rule=global"
        )


def decide_learning_rate(config: Config, found: Findings, batch: BatchPlan) -> LearningRatePlan:
    sc, opt = config.scaling, config.optimizer
    _check_warmup(config, found)
    global_batch, reference = batch.global_batch, max(sc.reference_batch, 1)  # below 1: the bounds table
    ratio = global_batch / reference
    if sc.lr_rule == LrRule.none:
        return LearningRatePlan.of(peak=(opt.learning_rate, "lr_rule=none: as requested"))
    if sc.lr_rule == LrRule.linear:
        return LearningRatePlan.of(
            peak=(
                opt.learning_rate * ratio,
                f"lr_rule=linear: {opt.learning_rate:g} x {global_batch}/{sc.reference_batch}",
            )
        )
    return LearningRatePlan.of(
        peak=(
            opt.learning_rate * math.sqrt(max(ratio, 0.0)),
            f"lr_rule=sqrt: {opt.learning_rate:g} x sqrt({global_batch}/{sc.reference_batch})",
        )
    )


def _check_warmup(config: Config, found: Findings) -> None:
    sc = config.scaling
    if sc.warmup_epochs > 0 and sc.warmup_steps > 0:
        found.refuse(
            "scaling.warmup_steps",
            sc.warmup_steps,
            f"0 when scaling.warmup_epochs is set ({sc.warmup_epochs:g}); set one of the two",
            "scaling.warmup_steps=0 (or scaling.warmup_epochs=0)",
        )
    has_schedule = (
        sc.warmup_epochs > 0
        or sc.warmup_steps > 0
        or str(config.optimizer.schedule) != "constant"
        or config.train.unfreeze_learning_rate > 0
    )
    if config.train.reduce_lr_on_plateau.enabled and has_schedule:
        found.refuse(
            "train.reduce_lr_on_plateau.enabled",
            True,
            "false while a learning-rate schedule (warmup, optimizer.schedule, train.unfreeze_learning_rate) "
            "drives the learning rate",
            "train.reduce_lr_on_plateau.enabled=false, or optimizer.schedule=constant with no warmup",
        )
