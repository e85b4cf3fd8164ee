"""The search's report on its study, as the parent run shows it: the best trial(s) (the Pareto front of a
multi-objective search), the parameter importances, the plots, the counts (a trial queued again counts once)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from launcher.files import write_json_atomic
from launcher.sweep.shared import counted

SEARCH_DIR = "search"  # in the sweep's summary dir: the study's own artifacts


def write_report(study, objectives: list[str], out: Path) -> dict:
    """What mattered, as the parent run shows it: the best trial(s) (the Pareto front of a multi-objective
    search), the parameter importances, the optimisation history and parallel-coordinates plots, the counts."""
    import optuna
    from optuna.trial import TrialState

    out.mkdir(parents=True, exist_ok=True)
    trials = counted(study)  # a trial queued again (its sweeper died) counts once
    counts = {state.name.lower(): sum(t.state == state for t in trials) for state in TrialState}
    report: dict[str, Any] = {"objectives": objectives, "trials": len(trials), "states": counts, "notes": []}
    report["queued_again"] = len(study.get_trials(deepcopy=False)) - len(trials)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    if complete:
        best = study.best_trials if len(objectives) > 1 else [study.best_trial]
        report["best"] = [{"number": t.number, "values": t.values, "params": t.params} for t in best]
    targets = [None] if len(objectives) == 1 else [lambda t, i=i: t.values[i] for i in range(len(objectives))]
    importances = {}
    for name, target in zip(objectives, targets, strict=True):
        try:
            found = optuna.importance.get_param_importances(study, target=target)
            importances[name] = {k: round(float(v), 4) for k, v in found.items()}
        except (RuntimeError, ValueError) as why:  # fewer than 2 finished trials, or nothing varied
            report["notes"].append(f"no importances for {name}: {why}")
    report["importances"] = importances
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna's matplotlib plots are marked experimental
        _plots(study, objectives, out, report)
    write_json_atomic(out / "search.json", report)
    return report


def _plots(study, objectives: list[str], out: Path, report: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as plots

    first = None if len(objectives) == 1 else (lambda t: t.values[0])
    drawings = {
        "optimization_history.png": lambda: plots.plot_optimization_history(
            study, target=first, target_name=objectives[0]
        ),
        "parallel_coordinates.png": lambda: plots.plot_parallel_coordinate(
            study, target=first, target_name=objectives[0]
        ),
        "param_importances.png": lambda: plots.plot_param_importances(study, target=first, target_name=objectives[0]),
        "intermediate_values.png": lambda: plots.plot_intermediate_values(study),
    }
    if len(objectives) > 1:
        drawings["pareto_front.png"] = lambda: plots.plot_pareto_front(study, target_names=objectives)
    for name, draw in drawings.items():
        try:
            axes = draw()
        except (RuntimeError, ValueError, ZeroDivisionError) as why:  # too few trials for this plot
            report["notes"].append(f"{name} not drawn: {why}")
            continue
        figure = axes.figure if hasattr(axes, "figure") else axes.flat[0].figure
        figure.savefig(out / name, dpi=90, bbox_inches="tight")
        plt.close(figure)
