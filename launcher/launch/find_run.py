"""A trained run found by what a person calls it: its name (outputs/runs/<name>), its run dir or its MLflow run id;
or the newest finished one. `mode=eval` / `mode=predict` (`eval.run`) and `model.init_from` ask here."""

from __future__ import annotations

import re
from pathlib import Path

from launcher.config.errors import ConfigError
from launcher.files import OUTCOME_FILE
from launcher.outcome import OutcomeRecord
from launcher.tracking.uri import resolve_uri

RUN_ID = re.compile(r"^[0-9a-f]{32}$")
OVERRIDES_FILE = Path(".hydra") / "overrides.yaml"


def find_training_run(wanted: str, launch_dir: Path, tracking_uri: str) -> Path:
    """eval.run as a run dir, a run name (outputs/runs/<name>), an MLflow run id, or "" (the newest finished)."""
    runs = launch_dir / "outputs" / "runs"
    found = local_training_run(wanted, launch_dir)
    if found is not None:
        return found
    if not wanted:
        raise ConfigError.single(
            "eval.run",
            "",
            f"a finished training run (none under {runs})",
            "train one first (python -m launcher name=exp1), then eval.run=exp1",
        )
    if RUN_ID.match(wanted):
        found = _run_dir_from_mlflow(wanted, tracking_uri, launch_dir)
        if found is not None:
            return found
    names = sorted(
        str(p.parent.parent.relative_to(runs))
        for p in runs.glob("**/" + str(OVERRIDES_FILE))
        if not _nested(p.parent.parent, runs)
    )[-8:]
    raise ConfigError.single(
        "eval.run",
        wanted,
        f"a training run: a run dir, a name under {runs} or an MLflow run id (recent: {names})",
        f"eval.run={names[-1] if names else '<name>'}",
    )


def local_training_run(wanted: str, launch_dir: Path) -> Path | None:
    """eval.run found on this machine without asking MLflow: a run dir, a name under outputs/runs, or "" (the newest
    finished training there); None when it is none of these (an MLflow run id, or no such run)."""
    runs = launch_dir / "outputs" / "runs"
    if not wanted:
        finished = [
            p.parent
            for p in runs.glob("**/" + OUTCOME_FILE)
            if _finished_training(p.parent) and (p.parent / OVERRIDES_FILE).is_file()
        ]
        return max(finished, key=lambda p: (p / OUTCOME_FILE).stat().st_mtime) if finished else None
    for candidate in (Path(wanted).expanduser(), launch_dir / wanted, runs / wanted):
        if (candidate / OVERRIDES_FILE).is_file():
            return candidate.resolve()
    return None


def local_run_with_id(run_id: str, launch_dir: Path) -> Path | None:
    """The training run under outputs/runs whose outcome.json names MLflow run `run_id` (read without MLflow: a run
    moved elsewhere or not on this machine is None); a multi-worker run's chief, not its workers."""
    runs = launch_dir / "outputs" / "runs"
    found = [
        p.parent
        for p in runs.glob("**/" + OUTCOME_FILE)
        if (record := OutcomeRecord.read(p.parent)) is not None and record.mode == "train" and record.run_id == run_id
    ]
    return min(found, key=lambda p: len(p.parts)).resolve() if found else None


def _nested(run_dir: Path, runs: Path) -> bool:
    """An eval or predict of a run, in that run's dir (<run>/eval/<time>: `launcher.launch.run_dirs`)."""
    return any((parent / OVERRIDES_FILE).is_file() for parent in run_dir.parents if parent.is_relative_to(runs))


def _finished_training(run_dir: Path) -> bool:
    record = OutcomeRecord.read(run_dir)
    return record is not None and record.finished_training


def _run_dir_from_mlflow(run_id: str, uri: str, launch_dir: Path) -> Path | None:
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    try:
        tags = MlflowClient(resolve_uri(uri, launch_dir)).get_run(run_id).data.tags
    except MlflowException:
        return None
    path = Path(tags.get("run_dir", ""))
    return path if (path / OVERRIDES_FILE).is_file() else None
