"""What one process of the launcher did, as a typed record (`outcome.json` in its run dir), and its exit code.

Written once, by the shell around every mode (`launcher.launch.shell`); read back by sweeps (did this job
finish, what is its objective), the local multi-worker launcher (the workers' final-weights digests),
`mode=eval` (the newest finished training run) and the benchmarks. A leaf: it imports only `files` and, for how
a fit ends (statuses, failure kinds, exit codes), `contract`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from launcher.contract import (  # noqa: F401 (how a fit ends: named here for every reader of outcome records)
    CHECKPOINT_WRITE,
    EXIT_FAILED,
    EXIT_FINISHED,
    EXPORT_FAILURE,
    FAILED,
    FINISHED,
    KILLED,
    NUMERICS_STOP,
    TRAINING_FAILURE,
    Ending,
    FitResult,
    exit_for_signal,
)
from launcher.files import OUTCOME_FILE, read_json, write_json_atomic

EXIT_REFUSED = 2  # the config, the data or the run dir refused before anything ran
EXIT_PROBLEM_FOUND = 3  # mode=doctor found what breaks the config

REFUSED = "REFUSED"  # a status beside MLflow's (FINISHED, FAILED, KILLED): nothing ran, nothing in MLflow


FORKED_BY_ENV = "LAUNCHER_FORKED_BY"  # set by `forkserver` in each process it forks


def forkserver_pid() -> int | None:
    """The pid of the forkserver that forked this process (a warm start); None for a new interpreter."""
    value = os.environ.get(FORKED_BY_ENV, "")
    return int(value) if value.isdigit() else None


IN_PROCESS = "in_process"  # a field's metadata: kept in the process, never written to outcome.json


def _in_process() -> Any:
    return field(default=None, repr=False, compare=False, metadata={IN_PROCESS: True})


def _written(cls) -> list:
    return [f for f in fields(cls) if not f.metadata.get(IN_PROCESS)]


@dataclass(frozen=True)
class OutcomeRecord:
    """One process's result: its status, MLflow run, error, final metrics and exit code (outcome.json); a training
    launch's also holds, in its own process only, the Plan, the fit's result, the run dir and the model."""

    status: str
    exit_code: int
    run_id: str | None = None
    error: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    weights_sha256: str | None = None  # multi-worker: of the final weights, the same on every worker
    mode: str = "train"  # eval / predict / doctor: not a training run
    failure: str | None = None  # TRAINING_FAILURE, NUMERICS_STOP or CHECKPOINT_WRITE, when FAILED
    stop_reason: str | None = None  # FINISHED: epochs, max_steps, early_stopping, or max_time (more to train)
    pid: int = field(default_factory=os.getpid)
    forked_by: int | None = field(default_factory=forkserver_pid)  # the forkserver's pid, if one forked it
    # What a training launch leaves in its own process (tests read them), never in outcome.json:
    plan: Any = _in_process()  # the resolved Plan (launcher.plan.decisions.Plan)
    result: FitResult | None = _in_process()  # None: nothing trained (explain=true, or the fit failed)
    run_dir: Path | None = _in_process()
    model: Any = _in_process()  # the trained Keras model
    explained: Any = _in_process()  # True: explain=true, nothing ran: no record is written (the run's stays)

    @classmethod
    def of_fit(cls, ending: Ending, result: FitResult | None, stop_reason: str | None, **given) -> OutcomeRecord:
        """A training launch's record: how its fit ended and what it trained (the final metrics, every epoch's
        logs, a resumed run's earlier epochs too); a failed export keeps why training ended."""
        return cls(
            status=ending.status,
            exit_code=ending.exit_code,
            error=ending.error,
            failure=ending.failure,
            stop_reason=ending.stop_reason or stop_reason,
            metrics=result.final if result else {},
            history=[e.logs for e in result.history] if result else [],
            result=result,
            **given,
        )

    @property
    def finished_training(self) -> bool:
        """Training is over (a launch its time budget stopped is FINISHED but has more to train)."""
        return self.status == FINISHED and self.mode == "train" and self.stop_reason != "max_time"

    def write(self, run_dir: Path) -> None:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        written = {f.name: getattr(self, f.name) for f in _written(type(self))}
        write_json_atomic(Path(run_dir) / OUTCOME_FILE, written)

    @classmethod
    def read(cls, run_dir: Path) -> OutcomeRecord | None:
        """The record in `run_dir`; None when there is none or it is unreadable (a process that was killed)."""
        data: Any = read_json(Path(run_dir) / OUTCOME_FILE, None)
        if not isinstance(data, dict) or "status" not in data:
            return None
        known = {f.name for f in _written(cls)}
        data = {k: v for k, v in data.items() if k in known}
        data.setdefault("exit_code", EXIT_FINISHED if data["status"] == FINISHED else EXIT_FAILED)
        data["mode"] = data.get("mode") or "train"
        return cls(**data)

    def objective(self, name: str) -> float:
        """The final value of metric `name`, NaN when the run did not finish or never logged it."""
        value = self.metrics.get(name)
        return float(value) if self.status == FINISHED and value is not None else float("nan")
