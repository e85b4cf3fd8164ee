"""What the trained model is exported as: the formats checked, keras always among them (mode=eval, predict and
the MLflow model read model.keras).

The same concept one level down: `launcher.export.trained` writes the formats this rule decides.
"""

from __future__ import annotations

from launcher.config.schema import Config
from launcher.plan.decisions import ExportPlan
from launcher.plan.rules.findings import Findings

FORMATS = {
    "keras": "model.keras (and best.keras when checkpoint.monitor keeps one)",
    "saved_model": "saved_model/: serving_default takes the raw input, returns the task's predictions",
    "tflite": "model.tflite, converted from the SavedModel and checked against it (a model TFLite cannot "
    "convert is reported; the run still finishes)",
}


def decide_export(cfg: Config, found: Findings) -> ExportPlan:
    asked = [str(f).strip() for f in cfg.export.formats]
    unknown = [f for f in asked if f not in FORMATS]
    if unknown:
        found.refuse(
            "export.formats",
            list(cfg.export.formats),
            f"a list of {list(FORMATS)} (unknown: {unknown})",
            f"export.formats=[{','.join(f for f in asked if f in FORMATS) or 'keras'}]",
        )
    if not cfg.checkpoint.export_model:
        if [f for f in asked if f != "keras"]:
            found.warn(
                f"export.formats={asked} with checkpoint.export_model=false: nothing is exported "
                "(checkpoint.export_model=true to export)"
            )
        return ExportPlan.of(formats=([], "checkpoint.export_model=false"))
    chosen = ["keras", *[f for f in FORMATS if f in asked and f != "keras"]]
    implied = "" if "keras" in asked else "; keras added (eval, predict and the MLflow model read model.keras)"
    return ExportPlan.of(formats=(chosen, "; ".join(f"{f}: {FORMATS[f]}" for f in chosen) + implied))
