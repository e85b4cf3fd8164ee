"""A run continued by a later launch keeps what it started with: what `auto` measured is read back, a changed
setting is applied and recorded or refused with a fix, never printed and ignored.

Pure: given the settings and Plan decisions of the run's earlier launch (its config.yaml and plan.yaml) and this
launch's settings, say which `auto` choices to keep, which changes apply, and which are refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.config.errors import Violation
from launcher.config.keys import as_override
from launcher.config.schema import flatten

# What may change when a run continues (a key, or a section ending in "."), and why: how long it trains, what is
# written or logged, how the launch behaves, and where it runs (the strategy, the batch: the Plan's `resume` maps the
# position; under scaling.lr_rule a new batch also scales the rate, as the Plan says). Never the model, the data,
# the task, the optimizer or the seed: everything else is the run's own, refused with the value it started with and
# how to start a new run from its weights.
CHANGEABLE = {
    "train.epochs": "training continues to the new last epoch",
    "train.max_steps": "training continues to the new last step",
    "train.max_time": "each launch's own time budget",
    "train.max_restarts": "how often a crashed launch is restarted",
    "train.restart_backoff": "how long before a restart",
    "train.test_at_end": "a held-out evaluation after training",
    "train.profile.": "what is traced, not what is learned",
    "train.telemetry": "what each step reports",
    "train.measure_utilization": "what each epoch reports",
    "train.remeasure_matmul": "whether auto's figure is measured again (a continued run keeps its first choices)",
    "train.val_every_steps": "how often it validates, not what it learns",
    "train.max_validation_steps": "how much it validates, not what it learns",
    "train.on_nonfinite": "what a NaN loss does",
    "train.collapse_steps": "when a collapsing loss scale stops it",
    "tracking.enabled": "whether this launch logs to MLflow",
    "strategy.": "where it runs: the Plan's `resume` says how the checkpoint's position maps onto it",
    "scaling.batch_size": "the Plan's `resume` rounds the data position to whole batches of the new size",
    "scaling.batch_rule": "the Plan's `resume` rounds the data position to whole batches of the new size",
    "checkpoint.interval_epochs": "how often it saves",
    "checkpoint.interval_steps": "how often it saves",
    "checkpoint.max_to_keep": "how many checkpoints are kept",
    "checkpoint.save_on_preemption": "whether a stop saves",
    "checkpoint.verify_restore": "whether a restore is checked",
    "checkpoint.export_model": "what is written after training",
    "checkpoint.monitor": "which epoch is kept as best.keras (the best starts over when it changes)",
    "checkpoint.mode": "which epoch is kept as best.keras (the best starts over when it changes)",
    "export.": "what is written after training",
    "tracking.on_unreachable": "what a tracking outage does",
    "tracking.fallback_uri": "where an outage logs",
    "tracking.outage_wait": "how long an outage is waited out",
    "tracking.step_metrics_every": "how often step metrics are logged",
    "tracking.system_metrics": "whether system metrics are logged",
    "tracking.system_metrics_interval": "how often system metrics are logged",
    "tracking.tags.": "tags added to the run",
    "tracking.register_model": "where the model is registered",
    "tracking.log_model": "whether the model is logged",
    "tracking.tensorboard": "whether TensorBoard files are written",
    "tracking.parent_run_id": "the sweep the run is listed under",
    "tracking.run_name": "the name MLflow shows (a continued sweep may name its jobs anew)",
    "tracking.sweep_id": "the sweep the run is listed under",
    "eval.": "read by mode=eval and mode=predict only",
    "doctor.": "read by mode=doctor only",
    "sweep.": "a sweep's bookkeeping",
    "mode": "what this launch does",
    "explain": "print the Plan only",
    "tf_logs": "what the console shows",
    "tune": "the steps auto measured are kept (see below)",
    "objective": "what a sweep reports",
    "name": "the run's name (the run dir)",
}
# `auto` decisions fixed at the first launch: the config key a continued launch pins, the plan.yaml decision
# holding what was chosen, and the value `auto` has in the config.
MEASURED = (
    ("precision.name", "precision", "auto"),
    ("xla", "xla", "auto"),
    ("optimizer.update", "optimizer.update", "auto"),
)


@dataclass(frozen=True)
class Continuation:
    """What a continued launch keeps and changes: `pins` (config key -> the value the first launch chose),
    `changed` (key, before, now) applied, and `refused` violations."""

    pins: dict[str, object]
    changed: tuple[tuple[str, object, object], ...]
    refused: tuple[Violation, ...]

    def describe_pins(self) -> str:
        return ", ".join(f"{k}={as_override(v)}" for k, v in self.pins.items())

    def describe_changes(self) -> str:
        return "; ".join(f"{key}: {as_override(before)} -> {as_override(now)}" for key, before, now in self.changed)


def changed_tags(described: str) -> dict[str, str]:
    """`changed.<key>` -> "before -> now", from a ContinuationPlan's `changed` (MLflow keeps a run's first params:
    a person comparing runs finds what a later launch changed in these tags)."""
    entries = [e.split(": ", 1) for e in described.split("; ") if ": " in e] if described else []
    return {f"changed.{key}": change for key, change in entries}


def continue_run(before: dict, now: dict, decisions: dict, run: str) -> Continuation:
    """`before`, `now`: the earlier launch's and this launch's settings (config.yaml); `decisions`: the earlier
    plan.yaml's decisions (key -> {"value", "reason"}); `run`: the run's name, for the fixes."""
    old, new = flatten(before), flatten(now)
    changed, refused = [], []
    # Another model or dataset option is one change (its own keys differ with it): named once, by its name.
    swapped = [s for s in ("model", "dataset") if old.get(f"{s}.name") != new.get(f"{s}.name")]
    # A key on one side only is the schema's change (a launcher upgraded between launches), not the person's; within
    # a swapped model or dataset option only its name is compared.
    for key in sorted(set(old) & set(new)):
        if _same(old[key], new[key]) or (key.split(".")[0] in swapped and not key.endswith(".name")):
            continue
        if changeable(key):
            changed.append((key, old.get(key), new.get(key)))
        else:
            refused.append(_refusal(key, old.get(key), new.get(key), run))
    pins = {}
    for key, decision, auto in MEASURED:
        chosen = decisions.get(decision, {}).get("value")
        if new.get(key) == auto and chosen is not None:
            pins[key] = chosen
    if now.get("tune", "off") != "off":  # the steps timed at the first launch are kept: nothing is timed again
        if "steps_per_execution" in decisions:
            pins["train.steps_per_execution"] = decisions["steps_per_execution"]["value"]
        pins["tune"] = "off"
    return Continuation(pins, tuple(changed), tuple(refused))


def _same(before, now) -> bool:
    """Equal as config.yaml holds them (YAML reads back ints, floats, lists; a NaN equals itself here)."""
    if isinstance(before, float) and isinstance(now, float) and before != before and now != now:
        return True
    return before == now


def changeable(key: str) -> bool:
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in CHANGEABLE)


def _refusal(key: str, before, now, run: str) -> Violation:
    fresh = (
        f"name={run}-2 model.init_from={run} {key}={as_override(now)}" if run else f"model.init_from=<this run> {key}"
    )
    return Violation(
        key,
        now,
        f"the value this run started with, {as_override(before)}: a continued run keeps its settings (those that may "
        "change are listed in docs/checkpoints.md, 'Continuing a run')",
        f"{key}={as_override(before)} to continue it; checkpoint.resume=never to start it over; or a new run from its "
        f"weights: {fresh}",
    )
