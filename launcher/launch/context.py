"""What the training launch's steps share: the config and the run's folders, then what each step adds (the Plan
as it grows, the prepared machine and data, the built model, the restored checkpoint, the workers' agreement,
the MLflow run). One object a step takes, instead of the same dozen parameters passed from step to step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.config.schema import Config
from launcher.contract import EpochResult, Position
from launcher.launch.checkpointer import Checkpointer
from launcher.launch.preflight import Prepared
from launcher.plan.decisions import Plan
from launcher.tracking.tracker import NullTracker, RunTracker
from launcher.train.agreement import Agreement


@dataclass
class Restored:
    """What the restore step found: the checkpointer (None with checkpoint.enabled=false), where a resumed run
    continues (None: from the start), what the hooks saved beside the checkpoint, and the Plan with the resume
    decision."""

    plan: Plan
    checkpointer: Checkpointer | None = None
    position: Position | None = None
    sidecar: dict = field(default_factory=dict)

    def earlier_epochs(self) -> list[EpochResult]:
        """The epochs the run ended before this launch, as its checkpoint's history holds them."""
        if self.position is None:
            return []
        ended = [e for e in self.sidecar.get("history") or [] if e["epoch"] < self.position.epoch]
        position_keys = ("epoch", "global_step")
        return [EpochResult(e["epoch"], {k: v for k, v in e.items() if k not in position_keys}) for e in ended]


@dataclass(frozen=True)
class LaunchContext:
    """One training launch as far as its steps got. Frozen: a step returns what it found and the launch makes
    the next context with it (`dataclasses.replace`), so no step changes what an earlier one handed on."""

    config: Config
    settings: dict  # the config as config.yaml and the MLflow params show it (no credentials)
    choices: dict  # Hydra's config-group choices (the run name)
    run_dir: Path
    launch_dir: Path
    checkpoint_dir: Path  # checkpoint.directory, or <run dir>/checkpoints
    plan: Plan | None = None  # gains a record at each step that decides something
    prepared: Prepared | None = None  # the machine, the data, the strategy, the trial
    built: Any = None  # launcher.train.build.Built: model, optimizer, task, callbacks
    freezer: Any = None  # model.freeze's launcher.train.fine_tune.Freezer, or None
    restored: Restored | None = None
    agreement: Agreement | None = None  # multi-worker only
    tracker: RunTracker = field(default_factory=NullTracker)

    @property
    def source(self):
        """The loaded data (launcher.train.data.DataSource)."""
        return self.prepared.source

    @property
    def checkpointer(self) -> Checkpointer | None:
        return self.restored.checkpointer if self.restored is not None else None
