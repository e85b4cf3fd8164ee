"""Which MLflow run a launch writes to when its run dir already had one and no checkpoint says so.

A run dir remembers its MLflow run from the moment the run is created (`RUN_FILE`). Before it creates one,
a launch writes a creation token there and tags the new run with it, so a launch killed between MLflow's
answer and the record still leaves a run its run dir can find (`pending_creation`): never an orphan run that
no launch continues. A launch that resumes from a checkpoint continues the checkpoint's run; one that finds
no checkpoint asks `succession`:

- the earlier run FINISHED: this is a new training in the same run dir, a new run;
- the earlier run ended (or was killed: still RUNNING, its process gone) before logging an epoch, with the
  same params: training starts over *in that run* (no second run for one training);
- otherwise (it logged epochs this start-over would log again, or its params differ): a new run, linked
  both ways by tags, and the earlier one, if still RUNNING, settled as KILLED.

Pure: the caller reads the earlier run from MLflow and applies the decision.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from launcher.files import RUN_FILE, read_json, write_json_atomic

SUCCESSOR_TAG = "launcher.successor_run_id"
PREDECESSOR_TAG = "launcher.predecessor_run_id"
STARTS_TAG = "launcher.starts"  # how many launches trained this run from step 0
CREATION_TAG = "launcher.creation"  # the token the run dir held while this run was being created
TRIAL_TAG = "sweep.trial"  # a search trial's number, on its run from its creation (its params come later)


class Succession(Enum):
    NEW = "new"  # nothing to continue: a run of its own
    ADOPT = "adopt"  # start training over in the earlier run
    SUCCEED = "succeed"  # a new run linked to the earlier one (settled KILLED if it was left RUNNING)


@dataclass(frozen=True)
class EarlierRun:
    """What the run dir's earlier MLflow run holds, as far as the decision needs."""

    run_id: str
    status: str
    epochs_logged: int
    params: dict[str, str] = field(default_factory=dict)
    starts: int = 1
    predecessor: str | None = None  # the run it succeeds (PREDECESSOR_TAG)


@dataclass(frozen=True)
class Decision:
    succession: Succession
    reason: str


def succession(earlier: EarlierRun | None, params: dict[str, str]) -> Decision:
    """What a launch without a checkpoint does with the run dir's earlier run."""
    if earlier is None:
        return Decision(Succession.NEW, "no earlier run in this run dir")
    if earlier.status == "FINISHED":
        return Decision(Succession.NEW, f"the earlier run {earlier.run_id} finished; this training is a new run")
    if earlier.epochs_logged:
        return Decision(
            Succession.SUCCEED,
            f"the earlier run {earlier.run_id} logged {earlier.epochs_logged} epoch(s) but left no checkpoint; "
            "training from step 0 would log them twice",
        )
    differing = sorted(k for k, v in earlier.params.items() if k in params and params[k] != v)
    if differing:
        return Decision(
            Succession.SUCCEED,
            f"the earlier run {earlier.run_id} has other values for {', '.join(differing[:5])}",
        )
    was = "was left RUNNING by a launch that is gone" if earlier.status == "RUNNING" else f"ended {earlier.status}"
    return Decision(
        Succession.ADOPT,
        f"the earlier run {earlier.run_id} {was} before its first checkpoint; training starts over in it",
    )


def remembered_run(run_dir: Path | None) -> str | None:
    """The MLflow run id this run dir remembers, if any."""
    if run_dir is None:
        return None
    record = read_json(Path(run_dir) / RUN_FILE, {})
    return record.get("run_id") if isinstance(record, dict) else None


def remember_run(run_dir: Path, run_id: str, experiment_id: str) -> None:
    """The run dir's run from now on (a pending creation is over)."""
    write_json_atomic(Path(run_dir) / RUN_FILE, {"run_id": run_id, "experiment_id": experiment_id})


@dataclass(frozen=True)
class PendingCreation:
    """A run a launch was creating when it stopped: tagged `CREATION_TAG`=`token` in `experiment_id`, if MLflow
    made it."""

    token: str
    experiment_id: str


def remember_creation(run_dir: Path, creation: PendingCreation) -> None:
    """Say, before asking MLflow for a run, how to find it; the run remembered so far stays until it exists."""
    record = read_json(Path(run_dir) / RUN_FILE, {})
    record = record if isinstance(record, dict) else {}
    record["creating"] = {"token": creation.token, "experiment_id": creation.experiment_id}
    write_json_atomic(Path(run_dir) / RUN_FILE, record)


def pending_creation(run_dir: Path | None) -> PendingCreation | None:
    """The creation a launch in this run dir began and did not record (it was killed in between), if any."""
    if run_dir is None:
        return None
    record = read_json(Path(run_dir) / RUN_FILE, {})
    creating = record.get("creating") if isinstance(record, dict) else None
    if not isinstance(creating, dict) or not creating.get("token") or not creating.get("experiment_id"):
        return None
    return PendingCreation(str(creating["token"]), str(creating["experiment_id"]))
