"""The task decides the loss, the metrics and the head; names that cannot work for it are refused."""

from __future__ import annotations

from launcher.config.models import model_kind
from launcher.config.schema import Config
from launcher.config.tasks import (
    ALL_METRICS,
    TASKS,
    is_import_path,
    known_epoch_metrics,
    loss_name,
    metric_names,
    monitor_problems,
    objective,
)
from launcher.plan.decisions import PrecisionPlan, TaskPlan
from launcher.plan.rules.findings import Findings


def decide_task(cfg: Config, found: Findings, precision: PrecisionPlan) -> TaskPlan:
    task = cfg.task.name.value
    spec = TASKS[task]
    kind = model_kind(cfg.model)
    loss = _loss(cfg, found, task, precision.mixed)
    metrics = _metrics(cfg, found, task)
    if task == "sequence" and not kind.per_token:
        found.refuse(
            "model",
            cfg.model.name,
            "a model that predicts a token per position for task=sequence: model=transformer (causal) or your own",
            "model=transformer",
        )
    target = objective(cfg)
    known = known_epoch_metrics(task, metrics)
    if known is not None:  # else a user metric: its name is known once it is built (the launch checks then)
        found.violations.extend(monitor_problems(cfg, task, known))
    return TaskPlan.of(
        name=(task, f"task={task}: labels are {spec.labels}"),
        head=(
            spec.head,
            f"the {task} task's output layer"
            if kind.builtin
            else "your model's output must match it (checked when it is built)",
        ),
        loss=loss,
        metrics=(
            metrics,
            "requested"
            if cfg.task.metrics
            else f"the {task} task's defaults; Keras metric objects "
            "summed over replicas and workers, then reduced (never a mean of means)",
        ),
        objective=(
            target,
            "requested"
            if cfg.objective != "auto"
            else f"objective=auto: the {task} task's headline validation metric (what a sweep job reports)",
        ),
    )


def _loss(cfg: Config, found: Findings, task: str, mixed: bool) -> tuple[str, str]:
    spec = TASKS[task]
    loss = loss_name(task, cfg.task.loss)
    if is_import_path(loss):
        return loss, (
            "yours (imported when the model is built); its inputs are cast to float32"
            + (" so it never computes in float16" if mixed else "")
        )
    if loss in spec.losses:
        return loss, (
            ("requested" if cfg.task.loss not in ("", "auto") else f"the {task} task's loss")
            + (", padding tokens masked" if task == "sequence" else "")
            + ("; computed in float32 on the float32 outputs" if mixed else "")
        )
    found.refuse(
        "task.loss",
        cfg.task.loss,
        f"one of {list(spec.losses)} for task={task}, or your own as module.path:function",
        f"task.loss={spec.losses[0]}",
    )
    return loss, "refused"


def _metrics(cfg: Config, found: Findings, task: str) -> list[str]:
    spec = TASKS[task]
    metrics = metric_names(task, cfg.task.metrics)
    wrong = [m for m in metrics if not is_import_path(m) and m in ALL_METRICS and m not in spec.metrics]
    kept = ",".join(m for m in metrics if m not in wrong) or spec.metrics[0]
    for name in wrong:
        found.refuse(
            "task.metrics",
            name,
            f"a metric that means something for task={task}: one of "
            f"{list(spec.metrics)}, any keras.metrics name, or module.path:Class",
            f"task.metrics=[{kept}]",
        )
    if "loss" in metrics:
        found.refuse(
            "task.metrics",
            "loss",
            "metric names other than loss (the loss is always logged)",
            "drop loss from task.metrics",
        )
    return metrics
