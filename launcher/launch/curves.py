"""The run's curves as one picture, `curves.png` in the run dir and among its MLflow artifacts: a panel per metric
(the loss, then the task's metrics), train and val on the same axes, epochs on x.

Drawn once at the launch's end, whatever ended it (a failed or stopped run draws what it trained), from the epoch
logs the launch already holds (`hooks.history`: a resumed run's earlier epochs come back with its checkpoint's
sidecar), never from an MLflow query; one epoch (debug=fast) is a point, not a curve: none is drawn. matplotlib is
loaded already in a training process (TensorFlow imports it); the drawing costs ~0.1 CPU-s (no layout engine, no
pyplot). A sweep's parent run has its own plots (`launcher.sweep.summary`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from launcher.files import CURVES_FILE, written_aside

PANEL_INCHES = (3.6, 2.8)  # one panel's width and height
DPI = 80


def series(history: list[dict], metrics: list[str]) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """Panel (the loss, then each metric the logs hold) -> "train" / "val" -> (1-based epochs, values); an epoch
    logged twice (stopped inside it, then resumed) counts as its last log."""
    by_epoch = {int(logs["epoch"]): logs for logs in history if "epoch" in logs}
    panels: dict[str, dict[str, tuple[list[int], list[float]]]] = {}
    for name in dict.fromkeys(["loss", *metrics]):
        lines = {}
        for label, key in (("train", name), ("val", f"val_{name}")):
            points = [(epoch + 1, float(logs[key])) for epoch, logs in sorted(by_epoch.items()) if key in logs]
            if points:
                lines[label] = ([e for e, _ in points], [v for _, v in points])
        if lines:
            panels[name] = lines
    return panels


def draw(panels: dict, path: Path) -> None:
    """One figure, a panel per metric, written to `path` (PNG) whole or not at all."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    width, height = PANEL_INCHES
    figure = Figure(figsize=(width * len(panels), height))
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    for ax, (name, lines) in zip(axes, panels.items(), strict=True):
        for label, (epochs, values) in lines.items():
            ax.plot(epochs, values, marker="o", markersize=3, label=label)
        ax.set_title(name)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    figure.subplots_adjust(left=0.9 / figure.get_figwidth(), right=0.98, bottom=0.17, top=0.9, wspace=0.35)
    written_aside(path, lambda aside: figure.savefig(aside, dpi=DPI, format="png"))


def write_curves(context, history: list[dict]) -> Path | None:
    """The chief's curves.png in the run dir, logged to the run's MLflow artifacts; None when fewer than two epochs
    were logged (or on another worker). A picture never fails a run: a drawing error is a warning."""
    if not context.plan.is_chief or len({logs.get("epoch") for logs in history}) < 2:
        return None  # one epoch is a point, not a curve (debug=fast): its numbers are on the console
    path = context.run_dir / CURVES_FILE
    try:
        panels = series(history, [m.name for m in context.built.task.train_metrics])
        if not panels:
            return None
        draw(panels, path)
    except Exception as err:  # noqa: BLE001 (a picture, not the run: never in place of the fit's own error)
        print(f"WARNING: the curves were not drawn ({type(err).__name__}: {err}).", file=sys.stderr, flush=True)
        return None
    context.tracker.log_artifact(path)
    return path
