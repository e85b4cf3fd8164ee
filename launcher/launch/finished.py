"""A finished training launched again with the same settings: nothing to train and nothing to export, said in a
moment, without loading TensorFlow.

The same command again after a run finished (a named run, a script run twice) used to load TensorFlow, build the
model, restore the checkpoint, reopen the MLflow run and export everything again to train nothing (40 s for the
default job). When the run dir's outcome.json says its training finished, its config.yaml holds exactly these
settings, its checkpoint and exports (a person's own formats' files too) are on disk and no tracking outage left
writes to deliver, the launch says so, prints the Done block from what the run recorded and ends FINISHED. Anything
else (a changed setting such as more epochs or another export format, a failed export, a deleted file) takes the
whole launch, which resumes, trains what is left and exports.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import yaml

from launcher.config.errors import ConfigError
from launcher.config.exports import EXPORT_FORMATS
from launcher.config.schema import Config
from launcher.export.yours import writer
from launcher.files import CONFIG_FILE, RUN_FILE, read_json
from launcher.launch.done import DoneFacts, done_lines
from launcher.launch.remote import is_remote
from launcher.outcome import OutcomeRecord, forkserver_pid
from launcher.tracking.links import MlflowUi
from launcher.tracking.spool import PENDING_FILE
from launcher.tracking.uri import resolve_uri

# How a finished training's fit ended when it covered its whole schedule (not early stopping, not a time budget).
COMPLETE = ("epochs", "max_steps")
MLFLOW_MODEL = "mlflow_model"  # launcher.export.mlflow_model.MODEL_ARTIFACT, without importing MLflow's pyfunc


def finished_already(config: Config, settings: dict, run_dir: Path, checkpoints: Path) -> OutcomeRecord | None:
    """The run dir's record when this launch has nothing to do (see the module), else None."""
    record = OutcomeRecord.read(run_dir)
    if config.explain or record is None or not record.finished_training or record.stop_reason not in COMPLETE:
        return None
    kept = config.checkpoint
    if not (kept.enabled and kept.resume == "auto" and not is_remote(str(kept.directory))):
        return None
    if not (checkpoints / "checkpoint").is_file() or (run_dir / PENDING_FILE).exists():
        return None
    try:
        exported = exported_files(config, run_dir)
    except ConfigError:  # a person's export writer that cannot be made: the whole launch refuses it, saying why
        return None
    if any(not path.exists() for path in exported.values()):
        return None
    if config.tracking.enabled and not record.run_id:
        return None
    from omegaconf import OmegaConf  # loaded already: Hydra composed this config

    written = _read_yaml(run_dir / CONFIG_FILE)  # as the training's preflight wrote it
    return record if written is not None and written == yaml.safe_load(OmegaConf.to_yaml(settings)) else None


def exported_files(config: Config, run_dir: Path) -> dict[str, Path]:
    """The files a finished run with this config left in its run dir: model.keras, best.keras, export.formats' (a
    person's own format: the file its writer names; ConfigError when it cannot be made)."""
    if not config.checkpoint.export_model:
        return {}
    files = {"model.keras": run_dir / "model.keras"}
    if config.checkpoint.monitor:
        files["best.keras"] = run_dir / "best.keras"
    for name in config.export.formats:
        if name in EXPORT_FORMATS and name != "keras":
            files[name] = run_dir / EXPORT_FORMATS[name].written
        elif name not in EXPORT_FORMATS:  # a person's own format: the file its writer names
            files[name] = run_dir / writer(name).written
    return files


def nothing_to_do(
    config: Config, record: OutcomeRecord, run_dir: Path, launch_dir: Path, checkpoints: Path
) -> OutcomeRecord:
    """Say that the run is done, with its Done block from what it recorded (the best epoch from the newest
    checkpoint's sidecar); the same record, this process's."""
    remembered = read_json(run_dir / RUN_FILE, {})
    uri = resolve_uri(config.tracking.uri, launch_dir) if config.tracking.enabled else ""
    hint = "tracking disabled (tracking.enabled=false)"
    if uri and isinstance(remembered, dict) and remembered.get("experiment_id"):
        hint = MlflowUi.of(uri).run_hint(str(remembered["experiment_id"]), str(record.run_id))
    logged_model = config.tracking.enabled and config.tracking.log_model and config.checkpoint.export_model
    final = record.metrics
    facts = DoneFacts(
        run_dir=run_dir,
        tracking_hint=hint,
        final=final,
        metrics=[name for name in final if f"val_{name}" in final and name != "loss"],
        exported=exported_files(config, run_dir),
        run_id=record.run_id if config.tracking.enabled else None,
        tracking_uri=uri,
        mlflow_model=MLFLOW_MODEL if logged_model else None,
        nothing_trained=True,
        best=_best_recorded(checkpoints) if config.checkpoint.monitor else {},
        best_file=run_dir / "best.keras" if (run_dir / "best.keras").exists() else None,
    )
    lines = done_lines(facts)
    lines.insert(2, "It finished with these same settings: nothing is trained or exported again.")
    print("\n".join(lines), flush=True)
    return dataclasses.replace(record, pid=os.getpid(), forked_by=forkserver_pid())


def _best_recorded(checkpoints: Path) -> dict:
    """The best epoch as the newest checkpoint's sidecar holds it (BestModelHook's state), else nothing."""
    steps = {int(p.stem.split("-")[1]): p for p in checkpoints.glob("ckpt-*.json") if p.stem.split("-")[1].isdigit()}
    sidecar = read_json(steps[max(steps)], {}) if steps else {}
    best = sidecar.get("best") if isinstance(sidecar, dict) else None
    return dict(best) if isinstance(best, dict) else {}


def _read_yaml(path: Path) -> dict | None:
    try:
        found = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    return found if isinstance(found, dict) else None
