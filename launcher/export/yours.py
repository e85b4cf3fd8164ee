"""Export formats of a person's or a plugin's own: `export.formats=[keras, my_pkg.onnx:OnnxWriter]`, or an
installed plugin's name (entry point group `launcher.exports`), written beside the built-in formats.

An export writer is an object, or a class made with no arguments, with:

    written: str                 the file or folder it writes in the run dir (logged to MLflow under model/)
    write(model, path) -> None   writes `model` (the trained keras.Model, loaded from model.keras outside any
                                 distribution strategy, in float32 variables) to `path`

Like the SavedModel, it is tried on the untrained model before training, so a writer that cannot write this model
is refused before any step, not found after training.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from launcher.config.errors import ConfigError
from launcher.config.exports import EXPORT_FORMATS, yours
from launcher.config.imports import import_component
from launcher.config.raised import told
from launcher.files import CURVES_FILE, written_aside

WANTED = "an export writer: an object or class with `written` (the file it writes) and `write(model, path)`"
# What a launch writes in the run dir itself: a writer's file may not replace one of these.
LAUNCHERS_OWN = frozenset(
    {f.written for f in EXPORT_FORMATS.values()}
    | {"best.keras", "mlflow_model", "checkpoints", "plan.yaml", "config.yaml", "outcome.json", "console.log"}
    | {CURVES_FILE}
)


def writer(name: str):
    """The export writer `name` stands for (its import path, or an installed plugin's), checked for its two parts
    and for a `written` that is a new name in the run dir."""
    path = yours(name)
    found = import_component("export.formats", path, WANTED)
    try:
        made = found() if isinstance(found, type) else found
    except Exception as err:
        raise ConfigError.single(
            "export.formats",
            name,
            f"{WANTED}, made with no arguments (it raised the error below)",
            "give its arguments defaults",
            detail=told(err, found),
        ) from None
    written = getattr(made, "written", None)
    if not (isinstance(written, str) and written and callable(getattr(made, "write", None))):
        raise ConfigError.single(
            "export.formats",
            name,
            f"{WANTED} (got {type(made).__name__} from {path})",
            'give it written = "model.onnx" and def write(self, model, path): ...',
        )
    place = PurePosixPath(written)
    if len(place.parts) != 1 or place.name in ("..", ".") or place.name in LAUNCHERS_OWN:
        raise ConfigError.single(
            "export.formats",
            name,
            f"a writer whose `written` is a new name in the run dir, not a path nor one of the launcher's own files "
            f"{sorted(LAUNCHERS_OWN)} ({path} writes {written!r})",
            'name a file of its own, e.g. written = "model.onnx"',
        )
    return made


def write_yours(model, names: list[str], folder: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """Each of `names` written into `folder` by its writer: (name -> path written, name -> why it failed). A writer
    that raises fails its own format only; one that cannot be made, or names no file of its own, is refused
    (ConfigError). Each file is written beside its name, then renamed: a crash never leaves half of one, and a rerun
    replaces the last one."""
    written: dict[str, Path] = {}
    failed: dict[str, str] = {}
    for name in names:
        made = writer(name)
        target = folder / made.written
        try:
            written_aside(target, lambda aside, made=made: made.write(model, aside))
        except Exception as err:
            if isinstance(err, FileNotFoundError) and err.filename and ".partial" in str(err.filename):
                failed[name] = f"its writer returned without writing {made.written}"
            else:
                failed[name] = told(err, made.write, indent="").splitlines()[0][:300]
            continue
        written[name] = target
    return written, failed
