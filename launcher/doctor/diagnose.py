"""The doctor's reasoning, pure: which addition breaks the run, and which overrides may fix it.

The bisection adds the config's features one at a time to a float32 one-device baseline
(precision, then the strategy, then XLA); the first trial that crashes, goes non-finite, collapses
or ends with a loss beyond `tolerance` of the baseline names the addition. The fixes are candidates
in the order a person would try them; the doctor runs each and recommends the first that trains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import yaml

from launcher.config.precisions import PRECISIONS, baseline, overflow_safe

HEALTHY = "healthy"


def judge(trial, baseline, tolerance: float) -> None:
    """Mark a trial that trained but ended worse than the baseline (or worse than it started) as diverged."""
    if trial.status != HEALTHY:
        return
    final = trial.final_loss
    if not math.isfinite(final):
        trial.status, trial.detail = "nonfinite", "the loss went non-finite"
        return
    if final > trial.first_loss * (1 + tolerance):
        trial.status = "diverged"
        trial.detail = f"the loss rose from {trial.first_loss:.4g} to {final:.4g} over the trial"
        return
    if baseline is not None and baseline is not trial and baseline.status == HEALTHY:
        reference = baseline.final_loss
        if final > reference * (1 + tolerance):
            trial.status = "diverged"
            trial.detail = (
                f"final loss {final:.4g} vs the float32 one-device baseline's {reference:.4g} "
                f"(tolerance {tolerance:.0%})"
            )


@dataclass
class Facts:
    """What the fixes depend on, read from the config and its Plan."""

    precision: str  # its name in the precision table (resolved)
    learning_rate: float  # optimizer.learning_rate as configured
    plan_lr: float  # after the batch rule's scaling
    lr_rule: str
    replicas: int
    batch_rule: str
    xla: bool
    clipnorm: float


@dataclass
class Fix:
    why: str
    overrides: dict[str, Any] = field(default_factory=dict)


def first_failure(trials: list) -> Any:
    """The first trial (baseline first) that is not healthy, or None."""
    return next((t for t in trials if t.status != HEALTHY), None)


def candidate_fixes(addition: str, facts: Facts, overflow_layers: list[str], culprit_layers: list[str]) -> list[Fix]:
    """Fixes to try, most specific first, for the addition that broke the run."""
    fixes: list[Fix] = []
    if addition == "precision":
        layers = overflow_layers or culprit_layers
        if layers:
            fixes.append(
                Fix(
                    f"keep {', '.join(layers)} in float32 (float32's range where float16 overflows)",
                    {"precision.float32_layers": layers},
                )
            )
        if PRECISIONS[facts.precision].needs_loss_scaling:
            fixes += [
                Fix(
                    f"{p.compute_dtype} has float32's exponent range and needs no loss scaling",
                    {"precision.name": p.name},
                )
                for p in overflow_safe()
            ]
        fixes.append(Fix("train in float32", {"precision.name": baseline().name}))
    elif addition == "strategy":
        if facts.plan_lr > facts.learning_rate * 1.0001 and facts.lr_rule != "none":
            fixes.append(
                Fix(
                    f"the {facts.lr_rule} rule raised the learning rate to {facts.plan_lr:g} for "
                    f"{facts.replicas} replicas; keep {facts.learning_rate:g}",
                    {"scaling.lr_rule": "none"},
                )
            )
        fixes.append(
            Fix(
                f"divide the learning rate by the {facts.replicas} replicas",
                {"optimizer.learning_rate": facts.learning_rate / max(1, facts.replicas)},
            )
        )
        if facts.batch_rule == "per_replica":
            fixes.append(
                Fix("keep the one-device global batch (split it over the replicas)", {"scaling.batch_rule": "global"})
            )
    elif addition == "xla":
        fixes.append(Fix("XLA changes the numerics or fails to compile this step: train without it", {"xla": "false"}))
    elif addition == "baseline":
        for factor in (10, 100):
            fixes.append(
                Fix(
                    f"even float32 on one device diverges: a {factor}x lower learning rate",
                    {"optimizer.learning_rate": facts.learning_rate / factor},
                )
            )
        if not facts.clipnorm:
            fixes.append(Fix("clip each gradient's norm at 1", {"optimizer.clipnorm": 1.0}))
    return fixes


def refusal_fixes(violations: list) -> list[Fix]:
    """The refusal lifted by the fixes its violations carry as overrides (`Violation.overrides`), tried together;
    none when some violation needs a person (its fix is advice, not an override)."""
    if not violations or any(not v.overrides for v in violations):
        return []
    overrides: dict[str, Any] = {}
    for violation in violations:
        for override in violation.overrides:
            key, _, value = override.partition("=")
            overrides[key] = yaml.safe_load(value)
    why = "; ".join(f"{v.key}: {v.expected}" for v in violations)
    return [Fix(f"apply the refusal's own fix ({why})", overrides)]
