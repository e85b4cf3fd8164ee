"""The trained model as files: `model.keras` (loads with `keras.saving.load_model`), `best.keras`, the serving
formats (export.formats) and the MLflow model, each logged to the run; the formats the export format table
(`launcher.config.exports`) says are copied beside remote checkpoints too.

Adding an export format: its entry in `launcher.config.exports` and the function that writes it, here called from
`export_trained` (or in `launcher.export.serving` when it is made from the served function).

The same concept one level up: `launcher.plan.rules.export` decides the formats written here.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from launcher.config.errors import ConfigError, Violation, raise_if_any
from launcher.config.exports import EXPORT_FORMATS, served_formats
from launcher.contract import EXIT_FAILED, EXPORT_FAILURE, FAILED, Ending, StopContext
from launcher.export.serving import SIGNATURE, ServingExports, export_saved_model, export_serving, served_inputs
from launcher.export.yours import write_yours
from launcher.files import written_aside
from launcher.train.ema import ema_weights


def export_model(model, path: Path) -> None:
    """Save the model without the training-only optimizer state (it lives in the checkpoints); under
    optimizer.use_ema with the weights' moving average."""

    optimizer = model.optimizer
    model.optimizer = None
    try:
        with ema_weights(model, optimizer):
            written_aside(path, model.save)  # Keras writes in place: a crash would leave half a model
    finally:
        model.optimizer = optimizer


class Reloaded:
    """The exported model.keras loaded once, outside the strategy, by whichever export needs it first: its predict
    runs on this process alone (the trained model's is a distributed call every multi-worker task would join)."""

    def __init__(self, path: Path):
        self.path = path
        self._model = None

    @property
    def model(self):
        if self._model is None:
            import keras

            self._model = keras.saving.load_model(self.path, compile=False)
        return self._model


def _reason(err: BaseException) -> str:
    """The OS's reason for a failed write (`[Errno 28] No space left on device: path`), else the error's first line."""
    if isinstance(err, OSError) and err.strerror:
        return f"{err.strerror} ({err.filename or 'writing'})" if err.filename else err.strerror
    return f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"


class ExportFailed(RuntimeError):
    """A requested export was not written (each other export was): the launch fails, its checkpoints kept, so the
    same command again finds nothing to train and only exports."""

    def __init__(self, failed: dict[str, str]):
        self.failed = failed
        super().__init__("; ".join(f"{name}: {why}" for name, why in failed.items()))

    def ending(self, context: StopContext) -> Ending:
        """FAILED, not restarted (an export fails the same way again until its cause is fixed); no traceback."""
        error = f"ExportFailed: {self}"[:4900]
        return Ending(
            FAILED,
            EXIT_FAILED,
            error=error,
            failure=EXPORT_FAILURE,
            tags={"error": error},
            message=f"\nNot exported: {self}.\nTraining is done and its checkpoints are kept: fix the cause and run "
            "the same command again; it only exports. The MLflow run is marked FAILED.",
            to_stderr=True,
        )


def check_exports(config, plan, built, source) -> None:
    """export.formats beyond model.keras, written once from the untrained model into a scratch dir before the first
    step: a format this model cannot be written to is refused now (ConfigError), not found after training. Only
    formats the person asked for (the MLflow model, made on every tracked run, is not tried twice). Every worker
    checks, so all refuse together (the chief alone exports)."""
    formats = served_formats(plan.export.formats)
    theirs = _yours(plan.export.formats)
    if not ((formats or theirs) and config.checkpoint.export_model):
        return
    try:
        with tempfile.TemporaryDirectory(prefix="launcher-export-check-") as scratch:
            untrained = Path(scratch) / "model.keras"
            built.model.save(untrained)  # not compiled yet: no optimizer state to leave out
            model = Reloaded(untrained).model
            failed = export_serving(model, built.task, source, Path(scratch), formats).failed if formats else {}
            failed.update(write_yours(model, theirs, Path(scratch))[1])
    except ConfigError:  # a writer of the person's own that cannot be made or names no file of its own
        raise
    except Exception as err:  # saving or reloading model.keras itself (e.g. a custom layer not registered)
        failed = {"keras": f"{type(err).__name__}: {' '.join(str(err).splitlines()[:2])[:300]}"}
    if "saved_model" in failed and "tflite" in formats:  # TFLite is converted from the SavedModel
        failed.setdefault("tflite", f"needs the SavedModel, which failed: {failed['saved_model']}")
    if "saved_model" not in formats:
        failed.pop("saved_model", None)
    working = [f for f in plan.export.formats if f not in failed]
    raise_if_any(
        Violation(
            "export.formats",
            name,
            f"a format this model can be written to; tried before training on the untrained model: {why}",
            f"export.formats=[{','.join(working)}]"
            if name != "keras"
            else "register the model's custom objects (keras.saving.register_keras_serializable) so model.keras loads",
        )
        for name, why in failed.items()
    )


@dataclass
class Exports:
    """What the finish wrote, for the Done block: each file (its name -> path), the MLflow model's artifact (None:
    not logged), and each export that failed (name -> why), which fails the launch once the finish is done."""

    written: dict[str, Path] = field(default_factory=dict)
    mlflow_model: str | None = None
    failed: dict[str, str] = field(default_factory=dict)


def export_trained(config, plan, built, source, tracker, run_dir: Path, best_exported=None, remote=None) -> Exports:
    """checkpoint.export_model, on the chief: model.keras (and best.keras), the serving formats and the MLflow
    model, logged to the run; beside remote checkpoints too, where a machine without this disk finds them. Every
    export is tried; those that failed fail the launch once the finish is done."""
    if not (config.checkpoint.export_model and plan.is_chief):
        return Exports()
    try:
        export_model(built.model, run_dir / "model.keras")
    except Exception as err:  # a full disk, a folder not writable: every other export is made from this one
        raise ExportFailed({"model.keras": _reason(err)}) from err
    tracker.log_artifact(run_dir / "model.keras", "model")
    if best_exported:
        tracker.log_artifact(best_exported, "model")
    reloaded = Reloaded(run_dir / "model.keras")
    exported = _export_for_serving(reloaded, plan.export.formats, built.task, source, tracker, run_dir)
    _export_yours(reloaded, plan.export.formats, tracker, run_dir, exported)
    if remote is not None:
        copy_beside_checkpoints(remote, {"keras": run_dir / "model.keras", **exported.written}, best_exported)
    failed = {f"export.formats {name}": why for name, why in exported.failed.items()}
    model_failure = _log_mlflow_model(reloaded, config.tracking, built.task, source, tracker, run_dir, exported)
    if model_failure:
        failed["tracking.log_model"] = model_failure
    logged = config.tracking.enabled and config.tracking.log_model and not model_failure
    files = {"model.keras": run_dir / "model.keras", **({"best.keras": Path(best_exported)} if best_exported else {})}
    return Exports({**files, **exported.written}, _mlflow_artifact() if logged else None, failed)


def _mlflow_artifact() -> str:
    from launcher.export.mlflow_model import MODEL_ARTIFACT  # MLflow's pyfunc module: only when a model is logged

    return MODEL_ARTIFACT


def copy_beside_checkpoints(remote, written: dict[str, Path], best_exported=None) -> None:
    """Each written format the export format table copies beside the remote checkpoints (`remote_copy`), and every
    format of the person's own, best.keras with model.keras: a file as it is, a folder (the SavedModel) file by
    file."""
    for name, path in written.items():
        if name in EXPORT_FORMATS and not EXPORT_FORMATS[name].remote_copy:  # yours are copied
            continue
        if path.is_dir():
            remote.push_folder(path)
        else:
            remote.push_file(path)
        if name == "keras" and best_exported:
            remote.push_file(Path(best_exported))


def _export_for_serving(reloaded: Reloaded, formats, task, source, tracker, run_dir: Path) -> ServingExports:
    """export.formats' SavedModel and TFLite, from model.keras; each logged, a failed one said, not fatal."""
    if not served_formats(formats):
        return ServingExports()
    exported = export_serving(reloaded.model, task, source, run_dir, formats)
    _log_exports(tracker, exported)
    return exported


def _log_exports(tracker, exported: ServingExports) -> None:
    """Each written export logged under model/ and said on the console; every one tagged `export.<name>` (written,
    its note, or why it failed; a colon of an import path as a dot: MLflow tag keys take none)."""
    tags = {name: f"failed: {why}" for name, why in exported.failed.items()}
    for name, path in exported.written.items():
        tags[name] = exported.notes.get(name, "written")
        if path.is_dir():
            tracker.log_artifacts(path, f"model/{path.name}")
        else:
            tracker.log_artifact(path, "model")
        print(f"  export   {name:<12} {path}" + (f"  ({exported.notes[name]})" if name in exported.notes else ""))
    tracker.set_tags({"export." + name.replace(":", "."): text for name, text in tags.items()})


def _yours(formats) -> list[str]:
    return [name for name in formats if name not in EXPORT_FORMATS]


def _export_yours(reloaded: Reloaded, formats, tracker, run_dir: Path, exported: ServingExports) -> None:
    """export.formats of the person's own (`launcher.export.yours`), from model.keras; each logged and added to
    `exported`, a failed one said there, not fatal until every export is tried."""
    theirs = _yours(formats)
    if not theirs:
        return
    written, failed = write_yours(reloaded.model, theirs, run_dir)
    _log_exports(tracker, ServingExports(written, failed))
    exported.written.update(written)
    exported.failed.update(failed)


def _log_mlflow_model(reloaded: Reloaded, tracking, task, source, tracker, run_dir: Path, exported) -> str | None:
    """tracking.log_model: the MLflow model, the SavedModel's served function (the run's SavedModel, or one made
    for it when export.formats has none), and tracking.register_model: a registered version of it. Returns why it
    could not be made (tagged; the caller fails the launch once every export was tried), else None."""
    if not tracking.enabled or not tracking.log_model:
        return None
    from launcher.export.mlflow_model import MODEL_ARTIFACT, save_mlflow_model  # MLflow's pyfunc: only when used

    saved = exported.written.get("saved_model")
    staging = None if saved else run_dir / "saved_model.mlflow"
    try:
        inputs = served_inputs(source, reloaded.model)
        if staging:
            export_saved_model(reloaded.model, task, inputs, staging)
        signature = inputs.preprocessing.served if inputs.preprocessing else SIGNATURE
        example = inputs.example(source, 5, signature)
        written = save_mlflow_model(saved or staging, example, run_dir / MODEL_ARTIFACT, signature, reloaded.path)
    except Exception as err:  # the training is done: say why the MLflow model is missing, keep the rest
        why = f"{type(err).__name__}: {' '.join(str(err).strip().splitlines()[:2])[:300]}"
        tracker.set_tags({"export.mlflow_model": f"failed: {why}"})
        return why
    finally:
        if staging:
            shutil.rmtree(staging, ignore_errors=True)
    tracker.log_artifacts(written, MODEL_ARTIFACT)
    if tracking.register_model:
        tracker.register_model(tracking.register_model, MODEL_ARTIFACT)
    return None
