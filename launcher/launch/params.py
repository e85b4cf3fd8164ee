"""What a launch tells MLflow about itself: its name, params (config + derived) and tags (the Plan)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from launcher.config.schema import flatten

# Plan decisions logged as `derived.<key>` params: the numbers a run is compared by.
DERIVED = (
    "replicas",
    "batch.global",
    "batch.per_replica",
    "lr",
    "warmup.steps",
    "train.steps_per_epoch",
    "train.total_steps",
    "precision.policy",
    "xla",
    "step",
    "optimizer.update",
    "loss_scale.optimizer",
)
NAME_GROUPS = ("model", "dataset", "precision", "strategy")


def run_name(config, choices: dict) -> str:
    """tracking.run_name, else the run's `name`, else model-dataset-precision-strategy."""
    return config.tracking.run_name or config.name or "-".join(str(choices.get(k, "?")) for k in NAME_GROUPS)


# The run's identity, not its settings: the run name and sweep links are the run's name and tags.
NOT_PARAMS = ("tracking.run_name", "tracking.parent_run_id", "tracking.sweep_id", "tracking.tags")


def run_params(settings: dict, plan) -> dict[str, Any]:
    """The flattened config and the Plan's derived choices: what makes two runs differ."""
    params = {k: v for k, v in flatten(settings).items() if not k.startswith(NOT_PARAMS)}
    params.update({f"derived.{k}": value for k, value in plan.values().items() if k in DERIVED})
    return params


def run_tags(plan, env, run_dir: Path, tracking, name: str) -> dict[str, str]:
    tags = plan.tags()
    tags.update(
        {
            "tf_version": env.tf_version,
            "keras_version": env.keras_version,
            "devices": env.describe_devices(),
            "run_dir": str(run_dir),
        }
    )
    tags.update({str(k): str(v) for k, v in (tracking.tags or {}).items()})
    if tracking.sweep_id:
        tags.update({"sweep_id": tracking.sweep_id, "sweep.role": "child", "sweep.overrides": name})
    return tags
