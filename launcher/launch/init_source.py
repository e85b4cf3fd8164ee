"""Where `model.init_from` points: found before anything is built, so a missing source is refused with the rest.

A run (a name under outputs/runs, a run dir or an MLflow run id) gives its best.keras, else its model.keras; a
registered model (`models:/name/version` or `models:/name@alias`) is downloaded from the tracking store; a `.keras`
file or a `ckpt-N` checkpoint prefix is used as it is. TensorFlow-free: the weights are read at build
(`launcher.train.fine_tune`).
"""

from __future__ import annotations

import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from launcher.config.errors import ConfigError
from launcher.launch.find_run import find_training_run
from launcher.outcome import OutcomeRecord
from launcher.tracking.succession import remembered_run
from launcher.tracking.uri import resolve_uri

KEY = "model.init_from"
REGISTRY = "models:/"


@dataclass(frozen=True)
class InitSource:
    """The weights to start from: a .keras file or a checkpoint prefix, what the Plan calls it, its MLflow run."""

    path: Path
    kind: str  # "keras" or "checkpoint"
    shown: str
    run_id: str | None = None


def locate_init_source(wanted: str, launch_dir: Path, tracking_uri: str) -> InitSource:
    wanted = str(wanted).strip()
    if wanted.startswith(REGISTRY):
        return _registered(wanted, launch_dir, tracking_uri)
    path = Path(wanted).expanduser()
    path = path if path.is_absolute() else launch_dir / path
    if path.suffix == ".keras" and path.is_file():
        return InitSource(_whole(path, wanted), "keras", str(path))
    if Path(f"{path}.index").is_file():
        return InitSource(path, "checkpoint", f"checkpoint {path}")
    try:
        run_dir = find_training_run(wanted, launch_dir, tracking_uri)
    except ConfigError:
        run_dir = None
    if run_dir is not None:
        for name in ("best.keras", "model.keras"):
            if (run_dir / name).is_file():
                record = OutcomeRecord.read(run_dir)
                run_id = (record.run_id if record else None) or remembered_run(run_dir)
                path = _whole(run_dir / name, wanted)
                return InitSource(path, "keras", f"{path} (run {run_dir.name})", run_id)
    raise ConfigError.single(
        KEY,
        wanted,
        "trained weights: a run (a name under outputs/runs, a run dir or an MLflow run id) with an exported "
        "model, models:/<name>/<version>, a .keras file or a ckpt-N checkpoint prefix"
        + (f" ({run_dir} has no best.keras or model.keras)" if run_dir is not None else " (none found by that name)"),
        "model.init_from=<the run's name>, e.g. the name= it was trained with",
    )


def _whole(path: Path, wanted: str) -> Path:
    """`path`, a `.keras` file (a zip archive) that is whole: one cut short (a crash or a full disk while it was
    written) is named as such, where Keras would say the file is not found."""
    try:
        with zipfile.ZipFile(path) as archive:
            broken = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        broken = str(err)
    if broken is None:
        return path
    raise ConfigError.single(
        KEY,
        wanted,
        f"a whole .keras file: {path} ({path.stat().st_size} bytes) is truncated or damaged ({broken}): what a "
        "crash or a full disk leaves while a model is written",
        "export it again (re-running its run finishes its exports), or start from the run's checkpoint: "
        "model.init_from=<its run dir>/checkpoints/ckpt-<step>",
    )


def _registered(wanted: str, launch_dir: Path, tracking_uri: str) -> InitSource:
    """A registered model version, looked up and downloaded through a client of this run's store (MLflow's global
    tracking and registry URIs are left as they are)."""
    import mlflow.artifacts
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri = resolve_uri(tracking_uri, launch_dir)
    name, _, version = wanted[len(REGISTRY) :].partition("/")
    try:
        client = MlflowClient(uri, registry_uri=uri)
        if "@" in name:
            name, _, alias = name.partition("@")
            found = client.get_model_version_by_alias(name, alias)
        else:
            found = client.get_model_version(name, version)
        source = client.get_model_version_download_uri(name, found.version)
        folder = Path(mlflow.artifacts.download_artifacts(source, dst_path=tempfile.mkdtemp(), tracking_uri=uri))
    except (MlflowException, OSError) as err:
        raise ConfigError.single(
            KEY,
            wanted,
            f"a registered model version in {tracking_uri} ({str(err).splitlines()[0][:200]})",
            "model.init_from=models:/<name>/<version> (mlflow models list: the registry's models)",
        ) from None
    files = sorted(folder.rglob("*.keras"))
    if not files:
        raise ConfigError.single(
            KEY, wanted, "a registered Keras model (its files hold no .keras model)", "register a launcher run's model"
        )
    return InitSource(files[0], "keras", f"{wanted} (version {found.version})", found.run_id)
