"""The Done block a training launch ends with: what a person looks for after a run, in one place.

The best epoch by `checkpoint.monitor` (its value, its epoch, its file), the final epoch's headline metrics, every
file the finish exported with its path, the run dir, the MLflow run id with the model's copy-ready `runs:/` URI and
the `mlflow models serve` command. Pure: the finish step gathers the facts, this lays them out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from launcher.console import readable
from launcher.contract import headline
from launcher.tracking.links import model_uri, serve_command

WIDTH = 20  # the label column


@dataclass
class DoneFacts:
    """What the Done block says; None or empty leaves its line out."""

    run_dir: Path
    tracking_hint: str  # the MLflow UI link (or why there is none)
    final: dict[str, float] = field(default_factory=dict)  # the last epoch's metrics and test_* ones
    metrics: list[str] = field(default_factory=list)  # the task's metric names, in order
    tested: list[str] = field(default_factory=list)  # the test_* metrics measured after training
    best: dict = field(default_factory=dict)  # BestModelHook.best: monitor, mode, value, epoch (0-based)
    best_file: Path | None = None  # best.keras, else the best/ checkpoint
    exported: dict[str, Path] = field(default_factory=dict)  # name -> path
    curves: Path | None = None  # curves.png: loss and metrics by epoch
    run_id: str | None = None
    tracking_uri: str = ""
    mlflow_model: str | None = None  # the MLflow model's artifact path in the run
    stopped_early: bool = False
    nothing_trained: bool = False


def done_lines(facts: DoneFacts) -> list[str]:
    """The block, line by line (the first is blank: it follows the last epoch's line)."""
    lines = []
    if facts.nothing_trained:
        lines += ["", "Nothing to train: the checkpoint already covers every epoch."]
    lines += ["", "Done." + (" (stopped early)" if facts.stopped_early else "")]
    if facts.best.get("monitor") and "value" in facts.best:
        where = f" -> {facts.best_file}" if facts.best_file else ""
        said = f"{facts.best['monitor']} {readable(facts.best['value'])} at epoch {int(facts.best['epoch']) + 1}"
        lines.append(f"  {'best':<{WIDTH}} {said}{where}")
    for key in [*headline(facts.metrics, ("examples_per_sec",)), *facts.tested]:
        if key in facts.final:
            lines.append(f"  {key:<{WIDTH}} {readable(facts.final[key])}")
    for name, path in facts.exported.items():
        lines.append(f"  {'exported ' + name:<{WIDTH}} {path}")
    if facts.curves:
        lines.append(f"  {'curves':<{WIDTH}} {facts.curves}")
    lines.append(f"  {'run dir':<{WIDTH}} {facts.run_dir}")
    if facts.run_id:
        lines.append(f"  {'MLflow run id':<{WIDTH}} {facts.run_id}")
    lines.append(f"  {'MLflow':<{WIDTH}} {facts.tracking_hint}")
    if facts.run_id and facts.mlflow_model:
        lines.append(f"  {'MLflow model':<{WIDTH}} {model_uri(facts.run_id, facts.mlflow_model)}")
        lines.append(f"  {'serve it':<{WIDTH}} {serve_command(facts.tracking_uri, facts.run_id, facts.mlflow_model)}")
    return lines
