"""The formats a trained model is exported as (`export.formats`), each saying what it is: the Plan's export rule,
the exports and the copy beside remote checkpoints ask this table instead of naming formats.

Adding a format is one entry here and the function that writes it (`launcher.export.trained.export_trained` calls
it; a format made from the served function belongs in `launcher.export.serving`). A person's or a plugin's own
format is no entry here: `yours` finds its writer's import path (`launcher.export.yours` writes it).
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.config.imports import component_path


@dataclass(frozen=True)
class ExportFormat:
    """One `export.formats` choice."""

    name: str
    description: str
    """What it is, as the Plan's reason says ("<name>: <description>")."""
    written: str
    """The file or folder it writes in the run dir (logged to the MLflow run under model/)."""
    served: bool
    """Made from the model's served function (`launcher.export.serving`: the SavedModel first, TFLite from it),
    so it is tried on the untrained model before training."""
    always: str = ""
    """Why it is written whenever the model is exported, even when not asked for ("" = only when asked)."""
    remote_copy: bool = True
    """Copied beside remote checkpoints (checkpoint.directory=s3://...), where a machine without this disk finds it."""


EXPORT_FORMATS: dict[str, ExportFormat] = {
    f.name: f
    for f in (
        ExportFormat(
            "keras",
            "model.keras (and best.keras when checkpoint.monitor keeps one)",
            "model.keras",
            served=False,
            always="eval, predict and the MLflow model read model.keras",
        ),
        ExportFormat(
            "saved_model",
            "saved_model/: serving_default takes the raw input, returns the task's predictions",
            "saved_model",
            served=True,
        ),
        ExportFormat(
            "tflite",
            "model.tflite, converted from the SavedModel and checked against it (a model TFLite cannot convert is "
            "reported; the run still finishes)",
            "model.tflite",
            served=True,
        ),
    )
}


def served_formats(formats) -> list[str]:
    """Of `formats`, those made from the served function (`ExportFormat.served`), in the order given."""
    return [name for name in formats if name in EXPORT_FORMATS and EXPORT_FORMATS[name].served]


def yours(name: str) -> str | None:
    """The import path of a format of the person's own: `module.path:Name`, or an installed plugin's name (entry point
    group launcher.exports); None for a built-in format (it wins over a plugin of the same name) or an unknown one."""
    return None if name in EXPORT_FORMATS else component_path("export", name)
