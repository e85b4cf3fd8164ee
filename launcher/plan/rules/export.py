"""What the trained model is exported as: the formats checked against the export format table
(`launcher.config.exports`), keras always among them (mode=eval, predict and the MLflow model read model.keras).

The same concept one level down: `launcher.export.trained` writes the formats this rule decides.
"""

from __future__ import annotations

from launcher.config.exports import EXPORT_FORMATS, yours
from launcher.config.imports import plugin_choices
from launcher.config.schema import Config
from launcher.plan.decisions import ExportPlan
from launcher.plan.rules.findings import Findings


def decide_export(config: Config, found: Findings) -> ExportPlan:
    asked = [str(f).strip() for f in config.export.formats]
    theirs = {f: path for f in asked if (path := yours(f))}
    unknown = [f for f in asked if f not in EXPORT_FORMATS and f not in theirs]
    always = [f for f in EXPORT_FORMATS.values() if f.always]
    if unknown:
        found.refuse(
            "export.formats",
            list(config.export.formats),
            f"a list of {list(EXPORT_FORMATS)}, your export writer as module.path:Name or "
            f"{plugin_choices('export')} (unknown: {unknown})",
            f"export.formats=[{','.join(f for f in asked if f not in unknown) or always[0].name}]",
        )
    if not config.checkpoint.export_model:
        if [f for f in asked if f not in {a.name for a in always}]:
            found.warn(
                f"export.formats={asked} with checkpoint.export_model=false: nothing is exported "
                "(checkpoint.export_model=true to export)"
            )
        return ExportPlan.of(formats=([], "checkpoint.export_model=false"))
    chosen = [f.name for f in always] + [f for f in EXPORT_FORMATS if f in asked and not EXPORT_FORMATS[f].always]
    implied = "".join(f"; {f.name} added ({f.always})" for f in always if f.name not in asked)
    described = "; ".join(f"{f}: {EXPORT_FORMATS[f].description}" for f in chosen)
    described += "".join(
        f"; {f}: your export writer ({path})" if f != path else f"; {f}: your export writer"
        for f, path in theirs.items()
    )
    chosen += list(theirs)
    return ExportPlan.of(formats=(chosen, described + implied))
