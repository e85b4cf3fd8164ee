"""The sweep's comparison artifacts on the parent run: a table (CSV, Markdown) and plots."""

from __future__ import annotations

import csv
import time
from pathlib import Path

from launcher.config.tasks import lower_is_better
from launcher.console import readable
from launcher.contract import SUMMARY_METRICS
from launcher.files import JOB_FILE, read_json
from launcher.tracking.client import PARAM_LIMIT, with_retry
from launcher.tracking.links import MlflowUi, SweepLinks

PARAMS = (
    "derived.precision.policy",
    "strategy.kind",
    "derived.replicas",
    "derived.xla",
    "derived.batch.global",
    "derived.lr",
    "derived.train.steps_per_epoch",
)


# What a person sweeps to change each derived value on purpose: a derived value that differs between jobs while
# none of its keys is swept differs by a side effect (a strategy's replicas under batch_rule=per_replica).
BATCH_KEYS = ("scaling", "scaling.batch_size", "scaling.batch_rule")
DERIVED_BY = {
    "derived.batch.global": BATCH_KEYS,
    "derived.lr": (*BATCH_KEYS, "optimizer.learning_rate", "scaling.lr_rule", "scaling.reference_batch", "optimizer"),
    # XLA (and the precision auto picks it for) sets drop_remainder, so the steps per epoch follow them too.
    "derived.train.steps_per_epoch": (
        *BATCH_KEYS,
        "dataset",
        "train.max_steps_per_epoch",
        "train.limit_fraction",
        "xla",
        "precision",
        "strategy",
    ),
}
SAME_BATCH_FIX = "scaling.batch_rule=global (every job then runs scaling.batch_size as its global batch)"


def unswept_differences(rows: list[dict], swept: list[str]) -> list[str]:
    """Derived values the jobs differ in though the sweep varies none of the keys that set them, each with the
    fix: a reader comparing the jobs would otherwise credit the difference to what was swept."""
    found = []
    swept = [key.lstrip("+~") for key in swept]
    for param, sources in DERIVED_BY.items():
        values = sorted({str(r.get(param)) for r in rows if r.get(param) not in ("", None)}, key=_numeric_first)
        if len(values) < 2 or any(key == s or key.startswith(f"{s}.") for key in swept for s in sources):
            continue
        fix = SAME_BATCH_FIX if param != "derived.lr" else f"{SAME_BATCH_FIX}, or scaling.lr_rule=none"
        found.append(
            f"{param.removeprefix('derived.')} differs between jobs ({', '.join(values)}) though the sweep varies "
            f"none of {', '.join(sources)}: it follows {', '.join(swept) or 'the jobs'}. fix: {fix}"
        )
    return found


def _numeric_first(value: str) -> tuple[int, float, str]:
    try:
        return 0, float(value), value
    except ValueError:
        return 1, 0.0, value


def children(client, parent_run_id: str):
    parent = client.get_run(parent_run_id)
    runs = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'",
        order_by=["attributes.start_time ASC"],
    )
    return parent, runs


def is_test_metric(name: str) -> bool:
    """A train.test_at_end result: reported beside the objective, never chosen by."""
    return name.startswith("test_")


def table_rows(runs) -> list[dict]:
    rows = []
    tested = sorted({m for run in runs for m in run.data.metrics if is_test_metric(m)})
    for run in runs:
        status = "PRUNED" if is_pruned(run) else "RETRIED" if is_retried(run) else run.info.status
        row = {"job": run.info.run_name, "status": status, "run_id": run.info.run_id}
        row.update({p: run.data.params.get(p, "") for p in PARAMS})
        row.update({m: run.data.metrics.get(m, "") for m in (*SUMMARY_METRICS, *tested)})
        row["error"] = run.data.tags.get("error", "").splitlines()[0] if run.data.tags.get("error") else ""
        rows.append(row)
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["job"])
        writer.writeheader()
        writer.writerows(rows)


def write_markdown(rows: list[dict], path: Path) -> None:
    if not rows:
        path.write_text("No jobs.\n")
        return
    columns = [c for c in rows[0] if c != "run_id"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row[c]) for c in columns) + " |")
    path.write_text("\n".join(lines) + "\n")


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "/")


def plot_curves(client, runs, path: Path, metric: str = "val_loss") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for run in runs:
        history = client.get_metric_history(run.info.run_id, metric)
        if history:
            ax.plot([m.step + 1 for m in history], [m.value for m in history], marker="o", label=run.info.run_name)
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} per job")
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def plot_metric_vs_job(rows: list[dict], path: Path, metric: str = "val_accuracy") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if isinstance(r.get(metric), float)]
    fig, ax = plt.subplots(figsize=(10, 1.5 + 0.5 * max(len(done), 1)))
    ax.barh([r["job"] for r in done], [r[metric] for r in done])
    ax.set_xlabel(f"final {metric}")
    ax.set_title(f"final {metric} by configuration")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def minimises(objective: str, direction: str | None = None) -> bool:
    """The sweeper's direction when it has one, else by the metric's name (losses and errors go down)."""
    if direction:
        return str(direction).lower().startswith("min")
    return lower_is_better(objective)


def sweep_goal(objectives, direction, default: str) -> tuple[list[str], list[str]]:
    """What a sweep's best is chosen by: an Optuna search's `hydra.sweeper.objectives` (one name or a list; null:
    `default`, the config's objective) and their directions (`hydra.sweeper.direction`: one for all, one per
    objective, or null: by each metric's name). A plain multirun has neither: the config's objective, by its name."""
    listed = (
        [default]
        if objectives in (None, [])
        else [str(o) for o in ([objectives] if isinstance(objectives, str) else objectives)]
    )
    if direction is None:
        return listed, ["minimize" if minimises(o) else "maximize" for o in listed]
    given = [str(direction)] if isinstance(direction, str) else [str(d) for d in direction]
    return listed, given * len(listed) if len(given) == 1 else given


def is_pruned(run) -> bool:
    """A search's trial its pruner stopped: FINISHED, but its final metrics are from an early epoch."""
    return run.data.tags.get("pruned") == "true"


def is_retried(run) -> bool:
    """A shared search's trial whose sweeper died: FAILED, and run again by another sweeper (not a failed job)."""
    return run.data.tags.get("sweep.retried") == "true"


def best_run(runs, objective: str, direction: str | None = None):
    """The finished (not pruned) child with the best final `objective`, or None."""
    scored = [r for r in runs if r.info.status == "FINISHED" and objective in r.data.metrics and not is_pruned(r)]
    if not scored:
        return None
    pick = min if minimises(objective, direction) else max
    return pick(scored, key=lambda r: r.data.metrics[objective])


def best_lines(runs, objective: str, direction: str | None = None, report: dict | None = None) -> list[str]:
    """What a sweep's end says on the console besides its table: the best job (its overrides, its objective value,
    its run dir and MLflow run id) and, for a search, the parameters that mattered most (top 3 importances)."""
    lines = []
    best = best_run(runs, objective, direction)
    if best is not None:
        tags = best.data.tags
        lines += [
            f"Best job: {tags.get('sweep.overrides') or best.info.run_name}",
            f"  {objective:<20} {readable(best.data.metrics[objective])}",
            *([f"  {'run dir':<20} {tags['run_dir']}"] if tags.get("run_dir") else []),
            f"  {'MLflow run id':<20} {best.info.run_id}",
        ]
    importances = (report or {}).get("importances") or {}
    for name, found in importances.items():
        top = sorted(found.items(), key=lambda item: -item[1])[:3]
        shown = ", ".join(f"{key} {value:.2f}" for key, value in top)
        lines.append(f"Importances{f' for {name}' if len(importances) > 1 else ''} (what mattered most): {shown}")
    return lines


def swept_values(job_overrides: list[list[str]], swept: list[str]) -> dict[str, str]:
    """`sweep.<key>` -> the values the jobs gave it, in Hydra's sweep syntax (`bf16,fp32`)."""
    values: dict[str, set[str]] = {key: set() for key in swept}
    for overrides in job_overrides:
        for override in overrides:
            key, _, value = override.partition("=")
            if key.lstrip("+~") in values:
                values[key.lstrip("+~")].add(value)
    return {f"sweep.{key}": ",".join(sorted(found)) for key, found in values.items() if found}


def parent_record(runs, job_overrides: list[list[str]], swept: list[str], objective: str, direction: str | None = None):
    """What the collapsed sweep row shows: the swept keys with their values as params; the best
    child's final metrics as metrics, its name and run id as tags."""
    params = swept_values(job_overrides, swept)
    best = best_run(runs, objective, direction)
    if best is None:
        return params, {}, {"sweep.objective": objective}
    metrics = {
        k: v for k, v in best.data.metrics.items() if k in SUMMARY_METRICS or k == objective or is_test_metric(k)
    }
    metrics[f"best.{objective}"] = best.data.metrics[objective]
    tags = {
        "sweep.objective": objective,
        "sweep.best_run_id": best.info.run_id,
        "sweep.best_overrides": best.data.tags.get("sweep.overrides", best.info.run_name),
    }
    return params, metrics, tags


def pruning_record(runs) -> tuple[dict, dict]:
    """What pruning saved: the pruned children and the training steps they did not run (their schedules' total
    minus where each stopped), against the steps every child ran."""
    pruned = [r for r in runs if is_pruned(r)]
    if not pruned:
        return {}, {}
    saved = sum(int(r.data.tags.get("pruned.steps_saved", 0)) for r in pruned)
    return (
        {"sweep.pruned_trials": float(len(pruned)), "sweep.steps_saved": float(saved)},
        {"sweep.pruned": ", ".join(f"{r.info.run_name} (epoch {r.data.tags.get('pruned.epoch')})" for r in pruned)},
    )


def search_record(report: dict | None) -> tuple[dict, dict]:
    """A search's answer to "what mattered": each parameter's importance as a metric, the best trial(s) (the
    Pareto front of a multi-objective search) as a tag."""
    if not report:
        return {}, {}
    metrics = {
        f"importance.{name}.{key}" if len(report["importances"]) > 1 else f"importance.{key}": value
        for name, found in report.get("importances", {}).items()
        for key, value in found.items()
    }
    tags = {"sweep.trial_states": ", ".join(f"{k} {v}" for k, v in report.get("states", {}).items() if v)}
    best = report.get("best") or []
    if len(report.get("objectives", [])) > 1 and best:
        objectives = report["objectives"]
        shown = [", ".join(f"{o}={v:.4g}" for o, v in zip(objectives, b["values"], strict=True)) for b in best]
        tags["sweep.pareto_front"] = "; ".join(f"trial {b['number']}: {s}" for b, s in zip(best, shown, strict=True))
        tags["sweep.pareto_front"] = tags["sweep.pareto_front"][:4900]
    return metrics, tags


def summarise(
    uri: str,
    parent_run_id: str,
    sweep_dir: Path,
    swept: list[str] = (),
    objective: str = "val_accuracy",
    direction: str | None = None,
    stopped_by: dict | None = None,
) -> list[dict]:
    """Write the table and plots into the sweep dir, log them on the parent with the sweep's record
    (`parent_record`, `pruning_record`, a search's `search_record`), end the parent run: FAILED when a fail-fast
    sweep stopped at a failed job (`stopped_by`), else FINISHED."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    parent, runs = children(client, parent_run_id)
    rows = table_rows(runs)
    # Each job's overrides as it recorded them (sweep.job), not re-split from its name: values may hold commas.
    job_overrides = [read_json(path, {}).get("overrides", []) for path in sorted(sweep_dir.glob(f"*/{JOB_FILE}"))]
    params, metrics, tags = parent_record(runs, job_overrides, list(swept), objective, direction)
    pruned_metrics, pruned_tags = pruning_record(runs)
    report = read_json(sweep_dir / "summary" / "search" / "search.json")
    search_metrics, search_tags = search_record(report)
    metrics.update({**pruned_metrics, **search_metrics})
    tags.update({**pruned_tags, **search_tags})
    if stopped_by:
        tags["sweep.stopped_by"] = f"{stopped_by['job']} (exit {stopped_by['exit_code']})"
    differences = unswept_differences(rows, list(swept))
    if differences:
        tags["sweep.unswept_differences"] = " | ".join(differences)[:4900]
    params = {k: v for k, v in params.items() if k not in parent.data.params}  # a continued sweep logged them
    # A sweep run again with nothing new: its summary's values are on the parent already, logged once.
    metrics = {k: v for k, v in metrics.items() if parent.data.metrics.get(k) != float(v)}
    now = int(time.time() * 1000)
    with_retry(
        client.log_batch,
        parent_run_id,
        params=[Param(k, v[:PARAM_LIMIT]) for k, v in params.items()],
        metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
        tags=[RunTag(k, str(v)) for k, v in tags.items()],
    )
    out = sweep_dir / "summary"
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "summary.csv")
    write_markdown(rows, out / "summary.md")
    plot_curves(client, runs, out / "val_loss_curves.png")
    plot_metric_vs_job(rows, out / "val_accuracy_by_job.png")
    with_retry(client.log_artifacts, parent_run_id, str(out), "summary")
    failed = sum(r["status"] not in ("FINISHED", "PRUNED", "RETRIED") for r in rows)
    with_retry(client.set_tag, parent_run_id, "sweep.jobs", str(len(rows)))
    with_retry(client.set_tag, parent_run_id, "sweep.failed_jobs", str(failed))
    links = SweepLinks(MlflowUi.of(uri), parent.info.experiment_id, parent_run_id, tuple(r.info.run_id for r in runs))
    with_retry(client.set_tag, parent_run_id, "mlflow.note.content", links.note())
    with_retry(client.set_terminated, parent_run_id, status="FAILED" if stopped_by else "FINISHED")
    print((out / "summary.md").read_text(), flush=True)
    for difference in differences:
        print(f"WARNING: {difference}", flush=True)
    print("\n".join(best_lines(runs, objective, direction, report)), flush=True)
    print(links.console(), flush=True)
    return rows
