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

from pathlib import Path

from launcher.config.errors import ConfigError
from launcher.config.exports import yours
from launcher.config.imports import import_component
from launcher.config.raised import told

WANTED = "an export writer: an object or class with `written` (the file it writes) and `write(model, path)`"


def writer(name: str):
    """The export writer `name` stands for (its import path, or an installed plugin's), checked for its two parts."""
    path = yours(name)
    found = import_component("export.formats", path, WANTED)
    made = found() if isinstance(found, type) else found
    if not (
        isinstance(getattr(made, "written", None), str) and made.written and callable(getattr(made, "write", None))
    ):
        raise ConfigError.single(
            "export.formats",
            name,
            f"{WANTED} (got {type(made).__name__} from {path})",
            'give it written = "model.onnx" and def write(self, model, path): ...',
        )
    return made


def write_yours(model, names: list[str], folder: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """Each of `names` written into `folder` by its writer: (name -> path written, name -> why it failed). A writer
    that raises fails its own format only."""
    written: dict[str, Path] = {}
    failed: dict[str, str] = {}
    for name in names:
        made = writer(name)
        target = folder / made.written
        try:
            made.write(model, target)
        except Exception as err:
            failed[name] = told(err, made.write, indent="").splitlines()[0][:300]
            continue
        if not target.exists():
            failed[name] = f"its writer returned without writing {made.written}"
            continue
        written[name] = target
    return written, failed
