"""The task decides the loss, the metrics and the head; names that cannot work for it are refused.

With `task.heads` every model output is a head with its own task, loss, metrics, loss weight and class weights:
the loss is their weighted sum, and each head's metrics are logged as Keras names a model output's."""

from __future__ import annotations

import difflib
import math
import re

from launcher.config.imports import plugin_choices, plugins
from launcher.config.models import model_kind
from launcher.config.schema import Config
from launcher.config.tasks import (
    ALL_METRICS,
    KERAS_METRICS,
    LOGGED_AS,
    NO_METRICS,
    RUN_METRICS,
    TASKS,
    best_model_monitor,
    component_args,
    component_name,
    component_problem,
    head_metric_names,
    is_import_path,
    is_metric_name,
    known_epoch_metrics,
    logged_name,
    loss_name,
    lower_is_better,
    metric_entries,
    metric_names,
    monitor_problems,
    objective,
    shown,
    users_loss_path,
)
from launcher.plan.decisions import PrecisionPlan, TaskPlan
from launcher.plan.rules.findings import Findings

BALANCED = "balanced"


def decide_task(config: Config, found: Findings, precision: PrecisionPlan) -> TaskPlan:
    if config.task.heads:
        return _decide_heads(config, found, precision)
    task = config.task.name.value
    spec = TASKS[task]
    kind = model_kind(config.model)
    loss = _loss(config.task, found, task, precision.mixed, "task")
    metrics = _metrics(config.task.metrics, found, task, "task")
    _per_token(config, found, task, kind, "task")
    _outputs(config.task, found, task, "task")
    class_weight = _class_weight(config.task.class_weight, found, task, "task.class_weight")
    target = objective(config)
    known = known_epoch_metrics(task, metrics)
    if known is not None:  # else a user metric: its name is known once it is built (the launch checks then)
        found.violations.extend(monitor_problems(config, task, known))
    arguments = _arguments(config.task)
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
            if config.task.metrics
            else f"the {task} task's defaults; Keras metric objects "
            "summed over replicas and workers, then reduced (never a mean of means)",
        ),
        objective=(
            target,
            "requested"
            if config.objective != "auto"
            else f"objective=auto: the {task} task's headline validation metric (what a sweep job reports)",
        ),
        class_weight=None if class_weight is None else (class_weight, _class_weight_reason(class_weight)),
        arguments=None if not arguments else (arguments, ARGUMENTS_REASON),
        **_best_model(config),
    )


ARGUMENTS_REASON = "as configured: each passed to its loss or metric by keyword when it is built"


def _arguments(tc) -> dict:
    """The keyword arguments the loss and metrics are built with, by what they are for: {"loss": {...},
    "metrics": {name: {...}}}; {} when none has any."""
    loss = component_args(tc.loss)
    metrics = {logged_name(m): component_args(m) for m in tc.metrics or () if component_args(m)}
    return {k: v for k, v in (("loss", loss), ("metrics", metrics)) if v}


def _decide_heads(config: Config, found: Findings, precision: PrecisionPlan) -> TaskPlan:
    """A task per model output: each head's loss, weight, metrics and class weights, refused together."""
    kind = model_kind(config.model)
    _unused_with_heads(config, found)
    heads, reasons, logged = {}, [], []
    for head, hc in config.task.heads.items():
        key = f"task.heads.{head}"
        task = hc.name.value
        loss, loss_reason = _loss(hc, found, task, precision.mixed, key)
        metrics = _metrics(hc.metrics, found, task, key)
        _per_token(config, found, task, kind, f"{key}.name")
        _outputs(hc, found, task, key)
        weight = _loss_weight(hc.loss_weight, found, key)
        class_weight = _class_weight(hc.class_weight, found, task, f"{key}.class_weight")
        heads[head] = {
            "task": task,
            "loss": loss,
            "loss_weight": weight,
            "metrics": metrics,
            "class_weight": "none" if class_weight is None else class_weight,
        }
        if _arguments(hc):
            heads[head]["arguments"] = _arguments(hc)
        reasons.append(
            f"{head}: {task}, {loss_reason}"
            + ("" if class_weight is None else f"; {_class_weight_reason(class_weight)}")
        )
        logged += head_metric_names(head, task, metrics)
    target = objective(config)
    known = known_epoch_metrics("heads", logged)
    if known is not None:
        found.violations.extend(monitor_problems(config, "heads", known))
    return TaskPlan.of(
        name=("heads", f"task.heads: a task per model output {list(heads)}"),
        head=(
            "; ".join(f"{head}: {TASKS[h['task']].head}" for head, h in heads.items()),
            "each output named by task.heads is its head; the model's output names must be exactly these "
            "(checked when it is built)",
        ),
        loss=(
            " + ".join(f"{h['loss_weight']:g}*{head}:{h['loss']}" for head, h in heads.items()),
            "per example the heads' losses times their loss_weight (and class weights), summed in float32, "
            "times the sample weight; reduced as a one-head loss is",
        ),
        metrics=(
            logged,
            "per head, as Keras names a model output's: <head>_loss (unweighted by loss_weight) and "
            "<head>_<metric>, val_ for validation; the total is loss / val_loss",
        ),
        objective=(
            target,
            "requested" if config.objective != "auto" else "objective=auto with several heads: the total val_loss",
        ),
        heads=(heads, " | ".join(reasons)),
        **_best_model(config),
    )


def _best_model(config: Config) -> dict:
    """checkpoint.monitor as kept: the metric (auto: the objective) and whether lower or higher is better."""
    kept = best_model_monitor(config)
    if kept is None:
        return {}
    metric, mode = kept
    chosen = config.checkpoint.monitor
    return {
        "best_by": (
            metric,
            f"checkpoint.monitor={chosen}: the objective; best.keras is the epoch where it is best"
            if chosen == "auto"
            else "requested",
        ),
        "best_mode": (
            mode,
            f"checkpoint.mode=auto: {'lower' if mode == 'min' else 'higher'} {metric} is better"
            if config.checkpoint.mode.value == "auto"
            else "requested",
        ),
    }


def _unused_with_heads(config: Config, found: Findings) -> None:
    """The one-head keys mean nothing once every head has its own: one set anyway is refused, not ignored."""
    first = next(iter(config.task.heads))
    unused = [
        ("task.loss", config.task.loss, component_name(config.task.loss) not in ("", "auto"), "loss"),
        ("task.metrics", list(config.task.metrics), bool(config.task.metrics), "metrics"),
        ("task.class_weight", config.task.class_weight, config.task.class_weight is not None, "class_weight"),
    ]
    for key, value, given, field in unused:
        if given:
            found.refuse(
                key,
                value,
                "no one-head value when task.heads gives each head its own",
                f"move it to task.heads.<output>.{field} (e.g. task.heads.{first}.{field})",
            )


def _which(task: str, prefix: str) -> str:
    """How a message names what a loss or metric is for: the one task (`task=...`, as ever) or a head's task."""
    return f"task={task}" if prefix == "task" else f"a {task} head"


def _per_token(config: Config, found: Findings, task: str, kind, key: str) -> None:
    if task == "sequence" and not kind.per_token:
        found.refuse(
            "model",
            config.model.name,
            f"a model that predicts a token per position for {key}=sequence: model=transformer (causal) or your own",
            "model=transformer",
        )


def _outputs(tc, found: Findings, task: str, prefix: str) -> None:
    """Logits or probabilities mean something only for the tasks whose outputs are scores of classes or tokens."""
    declared = tc.outputs.value
    if task == "regression" and declared != "auto":
        found.refuse(
            f"{prefix}.outputs",
            declared,
            "auto for a regression output (its values are the predictions: neither logits nor probabilities)",
            f"{prefix}.outputs=auto",
        )


def _loss(tc, found: Findings, task: str, mixed: bool, prefix: str) -> tuple[str, str]:
    """The loss of a task (`tc`: task or one of task.heads) and why; one the task cannot use is refused."""
    spec = TASKS[task]
    form = component_problem(f"{prefix}.loss", tc.loss, spec.losses[0])
    if form is not None:
        found.violations.append(form)
        return str(tc.loss), "refused"
    if hasattr(tc.loss, "items") and LOGGED_AS in tc.loss:  # the loss always logs as loss (<head>_loss)
        found.refuse(
            f"{prefix}.loss",
            shown(tc.loss),
            "a loss without `as` (it logs as loss, <head>_loss with several heads: `as` names a metric)",
            f"drop as: {tc.loss.get(LOGGED_AS)} from {prefix}.loss",
        )
    name = loss_name(task, tc.loss)
    loss = shown({"name": name, **component_args(tc.loss)})  # the Plan's form: huber, my.mod:Focal(gamma=2.0)
    path = users_loss_path(name)
    if path is not None:
        return loss, (
            ("yours" if path == name else f"the installed plugin's ({path})")
            + " (imported when the model is built); its inputs are cast to float32"
            + (" so it never computes in float16" if mixed else "")
        )
    if name in spec.losses:
        return loss, (
            ("requested" if component_name(tc.loss) not in ("", "auto") else f"the {task} task's loss")
            + (", padding tokens masked" if task == "sequence" else "")
            + ("; computed in float32 on the float32 outputs" if mixed else "")
        )
    found.refuse(
        f"{prefix}.loss",
        tc.loss,
        f"one of {list(spec.losses)} for {_which(task, prefix)}, your own as module.path:function, or "
        + plugin_choices("loss"),
        f"{prefix}.loss={spec.losses[0]}",
    )
    return loss, "refused"


def _metrics(requested, found: Findings, task: str, prefix: str) -> list[str]:
    """The metrics the run logs; each refused name is left out of them, so nothing suggested from them (a monitor,
    an objective) is itself refused."""
    spec = TASKS[task]
    key = f"{prefix}.metrics"
    example = "[{name:auc,curve:PR}]" if "auc" in spec.metrics else f"[{spec.metrics[0]}]"
    forms = [(entry, component_problem(key, entry, example)) for entry in requested]
    found.violations.extend(problem for _, problem in forms if problem is not None)
    requested = [entry for entry, problem in forms if problem is None]
    names = [component_name(entry) for entry in requested]
    if NO_METRICS in names and len(names) > 1:
        found.refuse(
            key,
            names,
            f"[{NO_METRICS}] alone (no metric beside the loss), or metrics without {NO_METRICS}",
            f"{key}=[{NO_METRICS}]",
        )
    metrics = metric_names(task, requested)  # as they log
    named = [component_name(entry) for entry in metric_entries(task, requested)]  # what each one is
    wrong = [m for m in named if not is_import_path(m) and m in ALL_METRICS and m not in spec.metrics]
    unknown = [m for m in named if m != "loss" and not is_metric_name(m)]
    kept = [m for m in named if m not in wrong and m not in unknown and m != "loss"]
    _logged_once(metrics, requested, found, key)
    _as_names(requested, found, key)
    fix = f"{prefix}.metrics=[{','.join(kept) or spec.metrics[0]}]"
    for name in wrong:
        found.refuse(
            f"{prefix}.metrics",
            name,
            f"a metric that means something for {_which(task, prefix)}: one of "
            f"{list(spec.metrics)}, any keras.metrics name, or module.path:Class",
            fix,
        )
    known = [*spec.metrics, *sorted(KERAS_METRICS), *(sorted(plugins("metric")) if unknown else [])]
    meant = {m: difflib.get_close_matches(m, known, n=1, cutoff=0.7) for m in unknown}
    kept += [close[0] for close in meant.values() if close and close[0] not in kept]
    for name, close in meant.items():
        found.refuse(
            f"{prefix}.metrics",
            name,
            f"a metric name the launcher or keras.metrics knows (did you mean {close[0]}?)"
            if close
            else f"a metric name the launcher or keras.metrics knows: one of {list(spec.metrics)} for "
            f"{_which(task, prefix)}, a keras.metrics name, module.path:Class, or {plugin_choices('metric')}",
            f"{prefix}.metrics=[{','.join(kept) or spec.metrics[0]}]",
        )
    if "loss" in named:
        found.refuse(
            f"{prefix}.metrics",
            "loss",
            "metric names other than loss (the loss is always logged)",
            f"drop loss from {prefix}.metrics",
        )
    return kept if (wrong or unknown) else metrics


def _logged_once(metrics: list[str], requested, found: Findings, key: str) -> None:
    """Two metrics logging under one name would overwrite each other: refused, with the `as` that tells them apart."""
    twice = sorted({name for name in metrics if metrics.count(name) > 1})
    if twice:
        found.refuse(
            key,
            [shown(entry) for entry in requested if logged_name(entry) in twice],
            f"metrics that log under distinct names ({twice} twice: one would overwrite the other)",
            f"name one with `as` in its entry, e.g. {{name: {twice[0]}, <argument>: <value>, as: {twice[0]}_2}}",
        )


def _as_names(requested, found: Findings, key: str) -> None:
    """An entry's `as` is a name of its own: letters, digits and _; not a name the run logs already (the loss, a
    val_ copy, the run's own metrics); and reading as the metric does, since the best model, early stopping and
    sweeps tell by the name whether it improves going down (losses and errors) or up."""
    for entry in requested:
        if not (hasattr(entry, "items") and LOGGED_AS in entry):
            continue
        alias, name = entry.get(LOGGED_AS), component_name(entry)
        cleaned = re.sub(r"\W+", "_", str(alias)).strip("_") or "metric"
        if not (isinstance(alias, str) and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", alias)):
            expected = "an `as` name of letters, digits and _, from a letter (the name a metric logs under)"
            fix = f"as: {cleaned if cleaned[0].isalpha() else 'm_' + cleaned}"
        elif alias.startswith("val_") or alias == "loss" or alias in RUN_METRICS:
            expected = "an `as` name the run does not log already (the loss, a val_ copy, the run's own metrics)"
            fix = f"as: {name.split(':')[-1].lower()}_2" if alias != f"{name}_2" else f"as: my_{name}"
        elif lower_is_better(alias) != lower_is_better(name):
            goes = "down (a loss or an error)" if lower_is_better(name) else "up"
            expected = (
                f"an `as` name that reads as {name} does: it improves going {goes}, and the best model, early "
                "stopping and sweeps read that from the name"
            )
            fix = f"as: {alias}_loss" if lower_is_better(name) else f"as: {name.split(':')[-1].lower()}_2"
        else:
            continue
        found.refuse(key, shown(entry), expected, f"{fix} in that entry")


def _loss_weight(value, found: Findings, prefix: str) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    if not ok:
        found.refuse(
            f"{prefix}.loss_weight",
            value,
            "a finite number >= 0: this head's share of the total loss (0 trains it not at all)",
            f"{prefix}.loss_weight=1.0",
        )
        return 1.0
    return float(value)


def _class_weight(value, found: Findings, task: str, key: str) -> str | dict[int, float] | None:
    """None (every class weighs 1), "balanced", or {class id: weight}; refused on a task without classes."""
    if value is None or value == "":
        return None
    if task != "classification":
        found.refuse(
            key,
            value,
            f"class weights only on a classification task (a {task} task's labels are not one class id each)",
            f"drop {key} (weigh examples instead: return (x, y, sample_weight) from the loader)",
        )
        return None
    if isinstance(value, str):
        if value == BALANCED:
            return value
        found.refuse(key, value, "balanced, or a mapping {class id: weight}", f"{key}={BALANCED}")
        return None
    mapping = _as_mapping(value)
    if mapping is None:
        found.refuse(
            key,
            value,
            "balanced, or a mapping {class id: weight} of integer ids >= 0 and finite weights >= 0",
            f"{key}={BALANCED} (or e.g. {key}={{0: 1.0, 1: 3.0}})",
        )
    return mapping


def _as_mapping(value) -> dict[int, float] | None:
    if not hasattr(value, "items"):
        return None
    out = {}
    for cls, weight in value.items():
        try:
            cls_id, w = int(str(cls)), float(weight)
        except (TypeError, ValueError):
            return None
        if cls_id < 0 or not math.isfinite(w) or w < 0:
            return None
        out[cls_id] = w
    return out or None


def _class_weight_reason(class_weight) -> str:
    if class_weight == BALANCED:
        return (
            "class_weight=balanced: n / (classes * count of the class) from the training labels (task.class_weights "
            "once the data is loaded); weighs the training loss and metrics, as Keras's fit(class_weight=)"
        )
    return "class weights as requested (a class not named weighs 1); weigh the training loss and metrics"
