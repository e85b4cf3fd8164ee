"""What each task needs: its loss, its metrics, its head, the labels it takes (pure: no TensorFlow).

The resolver's task rule reads this table; `launcher.train.tasks` builds the Keras objects it names (the same
concept one level down).
A name with a colon (module.path:Name) is the user's own component, checked when it is imported; so is the name of
an installed plugin loss or metric (entry point groups launcher.losses, launcher.metrics) that is no built-in name.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.config.errors import Violation
from launcher.config.imports import component_path, is_import_path

# The launcher's names of metrics that score one positive class: on a classification head they need a binary head
# (one logit or sigmoid unit, or two classes) and are fed the positive class's probability (checked when built).
BINARY_NAMES = ("auc", "precision", "recall", "binary_crossentropy")


@dataclass(frozen=True)
class TaskSpec:
    losses: tuple[str, ...]
    default_metrics: tuple[str, ...]
    metrics: tuple[str, ...]  # the built-in metric names that make sense for the task
    head: str  # what the output layer is, for the Plan
    labels: str  # what the dataset's y must be, for errors
    objective: str  # the sweep objective `objective=auto` means


TASKS: dict[str, TaskSpec] = {
    "classification": TaskSpec(
        losses=("crossentropy",),
        default_metrics=("accuracy",),
        metrics=("accuracy", "top5_accuracy", "crossentropy", *BINARY_NAMES),
        head="Dense(num_classes) logits or softmax (binary: also one logit or sigmoid unit)",
        labels="integer class ids in 0..num_classes-1",
        objective="val_accuracy",
    ),
    "multilabel": TaskSpec(
        losses=("binary_crossentropy",),
        default_metrics=("auc", "precision", "recall"),
        metrics=("auc", "precision", "recall", "accuracy", "binary_crossentropy"),
        head="Dense(num_labels) logits or sigmoid, one per label",
        labels="0/1 per label, shape (num_labels,)",
        objective="val_auc",
    ),
    "regression": TaskSpec(
        losses=("mse", "mae", "huber"),
        default_metrics=("mae", "rmse"),
        metrics=("mae", "mse", "rmse"),
        head="Dense(targets), linear",
        labels="real-valued targets, shape () or (targets,)",
        objective="val_loss",
    ),
    "sequence": TaskSpec(
        losses=("crossentropy",),
        default_metrics=("accuracy", "perplexity"),
        metrics=("accuracy", "perplexity"),
        head="Dense(vocab_size) logits per token (causal attention)",
        labels="the next token id per position",
        objective="val_accuracy",
    ),
}
# Every built-in loss name: a plugin loss of the same name is shadowed by it.
LOSSES = sorted({name for spec in TASKS.values() for name in spec.losses})
# Built-in metric names valid for no task at all would be a typo; names Keras knows beyond these are accepted
# for a task when keras.metrics knows them.
ALL_METRICS = sorted({name for spec in TASKS.values() for name in spec.metrics})
# The lower-case names `keras.metrics.get` takes (Keras 3.15), so a misspelt metric is refused with everything else
# before TensorFlow loads; a class name (`AUC`) is checked when built. tests/config/test_tasks.py keeps it Keras's.
KERAS_METRICS = frozenset(
    [
        "accuracy",
        "auc",
        "bce",
        "binary_accuracy",
        "binary_crossentropy",
        "binary_io_u",
        "categorical_accuracy",
        "categorical_crossentropy",
        "categorical_hinge",
        "concordance_correlation",
        "cosine_similarity",
        "f1_score",
        "f_beta_score",
        "false_negatives",
        "false_positives",
        "hinge",
        "io_u",
        "kl_divergence",
        "log_cosh_error",
        "mae",
        "mape",
        "mean",
        "mean_absolute_error",
        "mean_absolute_percentage_error",
        "mean_io_u",
        "mean_metric_wrapper",
        "mean_squared_error",
        "mean_squared_logarithmic_error",
        "metric",
        "mse",
        "msle",
        "one_hot_io_u",
        "one_hot_mean_io_u",
        "pearson_correlation",
        "poisson",
        "precision",
        "precision_at_recall",
        "r2_score",
        "recall",
        "recall_at_precision",
        "root_mean_squared_error",
        "sensitivity_at_specificity",
        "sparse_categorical_accuracy",
        "sparse_categorical_crossentropy",
        "sparse_top_k_categorical_accuracy",
        "specificity_at_sensitivity",
        "squared_hinge",
        "sum",
        "top_k_categorical_accuracy",
        "true_negatives",
        "true_positives",
    ]
)


def is_metric_name(name: str) -> bool:
    """A name the launcher or Keras can build a metric from (an import path or a plugin's name is the person's own,
    checked at build; a capitalised name is a Keras class name, checked at build)."""
    return _keras_or_builtin_metric(name) or users_metric_path(name) is not None


def _keras_or_builtin_metric(name: str) -> bool:
    return not is_import_path(name) and (name in ALL_METRICS or name in KERAS_METRICS or name[:1].isupper())


def users_metric_path(name: str) -> str | None:
    """The import path of the person's own metric `name` (an import path, or an installed plugin's name that no
    built-in or Keras metric has); None for a built-in or Keras name, or an unknown one."""
    if _keras_or_builtin_metric(name):
        return None
    return component_path("metric", name)


def users_loss_path(name: str) -> str | None:
    """The import path of the person's own loss `name` (an import path, or an installed plugin's name that is no
    built-in loss); None for a built-in loss, or an unknown name."""
    if name in LOSSES:
        return None
    return component_path("loss", name)


# `metrics: [none]`: no metric beside the loss (`[]` keeps meaning the task's defaults, as it always has).
NO_METRICS = "none"
# `{name: auc, curve: PR, as: pr_auc}`: the name a metric logs under (Keras's own `name=` argument; an entry's `name`
# says which metric it is), so two of one kind can be logged side by side.
LOGGED_AS = "as"


def component_name(entry) -> str:
    """What a loss or metric entry names: the entry itself (a name), or its `name` key ({name: auc, curve: PR});
    "" when a mapping has no string name (refused by `component_problem`)."""
    if hasattr(entry, "items"):
        name = entry.get("name", "")
        return name if isinstance(name, str) else ""
    return entry if isinstance(entry, str) else ""


def component_args(entry) -> dict:
    """The keyword arguments a loss or metric entry gives its class or function: every key but `name`."""
    if not hasattr(entry, "items"):
        return {}
    return {str(k): _plain(v) for k, v in entry.items() if k not in ("name", LOGGED_AS)}


def logged_name(entry) -> str:
    """The name a metric entry logs under: its `as` key, else what it names."""
    if hasattr(entry, "items") and isinstance(entry.get(LOGGED_AS), str) and entry.get(LOGGED_AS):
        return entry[LOGGED_AS]
    return component_name(entry)


def _plain(value):
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple) or type(value).__name__ == "ListConfig":
        return [_plain(v) for v in value]
    return value


def shown(entry) -> str:
    """An entry as the Plan shows it: `auc`, `auc(curve='PR')`."""
    args = component_args(entry)
    name = component_name(entry)
    call = f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})" if args else name
    return call if logged_name(entry) == name else f"{call} as {logged_name(entry)}"


def component_problem(key: str, entry, example: str) -> Violation | None:
    """A loss or metric entry that is neither a name nor {name: <name>, <argument>: <value>, ...}."""
    if isinstance(entry, str):
        return None
    if hasattr(entry, "items") and component_name(entry) and all(_is_plain(v) for v in entry.values()):
        return None
    return Violation(
        key,
        entry,
        "a name, or a mapping {name: <name>, <argument>: <value>, ...} whose arguments are numbers, strings, "
        "booleans or lists of them",
        f"{key}={example}",
    )


def _is_plain(value) -> bool:
    if hasattr(value, "items"):
        return False
    if isinstance(value, list | tuple) or type(value).__name__ == "ListConfig":
        return all(_is_plain(v) for v in value)
    return value is None or isinstance(value, bool | int | float | str)


def loss_name(task: str, requested) -> str:
    """The loss the task uses: the requested one (a name or {name: ..., arguments}), or the task's first."""
    name = component_name(requested)
    return TASKS[task].losses[0] if name in ("", "auto") else name


def metric_entries(task: str, requested) -> list:
    """The task's metric entries: the requested ones (names or {name: ..., arguments}), none for `[none]`, or its
    defaults for `[]`."""
    entries = list(requested or ())
    if any(component_name(entry) == NO_METRICS for entry in entries):
        return [entry for entry in entries if component_name(entry) != NO_METRICS]
    return entries if entries else list(TASKS[task].default_metrics)


def metric_names(task: str, requested) -> list[str]:
    """The names the task's metrics log under (an entry's `as`, else what it names)."""
    return [logged_name(entry) for entry in metric_entries(task, requested)]


def objective(config) -> str:
    """`objective=auto` resolved from the task: its headline validation metric when the run logs it, else
    val_loss."""
    chosen = str(getattr(config, "objective", "auto") or "auto")
    if chosen != "auto":
        return chosen
    if getattr(config.task, "heads", None):
        return "val_loss"  # several heads: the total loss is the one headline they share
    task = config.task.name.value  # a TaskName, in the typed Config and the composed node alike
    headline = TASKS[task].objective
    logged = ["loss", *metric_names(task, config.task.metrics)]
    return headline if headline.removeprefix("val_") in logged else "val_loss"


def lower_is_better(metric: str) -> bool:
    """Does `metric` improve by going down? Losses, errors and perplexity do (and the regression errors mae, mse,
    rmse); accuracy, AUC, precision and recall go up."""
    name = metric.removeprefix("val_")
    return any(word in name for word in ("loss", "error", "perplexity", "crossentropy")) or name.endswith(
        ("mae", "mse", "rmse")
    )


def best_model_monitor(config) -> tuple[str, str] | None:
    """What the best model is kept by: (checkpoint.monitor, "min" | "max"), or None ("" = off). monitor=auto is
    the run's objective; mode=auto goes by the metric's name (`lower_is_better`)."""
    chosen = str(config.checkpoint.monitor or "")
    if not chosen:
        return None
    metric = objective(config) if chosen == "auto" else chosen
    mode = config.checkpoint.mode.value  # a MonitorMode
    if mode == "auto":
        mode = "min" if lower_is_better(metric) else "max"
    return metric, mode


def head_metric_names(head: str, task: str, requested) -> list[str]:
    """What one head logs, as Keras names a model output's metrics: <head>_loss, then <head>_<metric> (a user
    metric's import path or plugin name is kept as is: its name is known once it is built)."""
    named = metric_names(task, requested)
    return [f"{head}_loss", *(m if users_metric_path(m) else f"{head}_{m}" for m in named)]


def known_epoch_metrics(task: str, metrics: list[str]) -> list[str] | None:
    """Every epoch metric a run of this task logs, or None when a user metric's name is only known at build (an
    import path or an installed plugin's name among `metrics`)."""
    if any(users_metric_path(m) for m in metrics):
        return None
    return epoch_metrics(metrics)


def epoch_metrics(metrics: list[str]) -> list[str]:
    """Every epoch metric a run logs whose metrics (as built, or built-in names) are `metrics`."""
    names = ["loss", *metrics]
    return names + [f"val_{n}" for n in names] + list(RUN_METRICS)


# Epoch metrics every run logs besides the task's (monitorable too, if rarely wanted).
RUN_METRICS = (
    "learning_rate",
    "loss_scale",
    "grad_norm",
    "skipped_steps",
    "examples_per_sec",
    "model_flops_utilization",
)


def monitor_problems(config, task: str, known: list[str]) -> list[Violation]:
    """Every metric named as a monitor or objective must be one the run logs (`known`)."""
    tr = config.train
    kept = config.checkpoint.monitor if config.checkpoint.monitor != "auto" else ""  # auto: the objective, checked next
    monitors = [("checkpoint.monitor", kept), ("objective", objective(config))]
    if tr.early_stopping.enabled:
        monitors.append(("train.early_stopping.monitor", tr.early_stopping.monitor))
    if tr.reduce_lr_on_plateau.enabled:
        monitors.append(("train.reduce_lr_on_plateau.monitor", tr.reduce_lr_on_plateau.monitor))
    found = (
        metric_problem(key, name, task, known, "val_loss" if key != "objective" else None) for key, name in monitors
    )
    return [problem for problem in found if problem is not None]


def metric_problem(key: str, name: str, task: str, known: list[str] | None, fix: str | None = None) -> Violation | None:
    """A metric named to steer training (a monitor, a sweep's objective) that the run never logs, or a test_* one;
    `known` None: a user metric's name is only known at build. `fix`: the metric suggested (default: the task's last
    validation metric)."""
    if not name:
        return None
    if name.startswith("test_"):
        return Violation(
            key,
            name,
            "a training or validation metric: test_* metrics are measured once, after training, and never "
            "steer it (a model chosen by its test score has no unbiased estimate left)",
            f"{key}={name.replace('test_', 'val_', 1)} (and train.test_at_end=true to report {name})",
        )
    if known is None or name in known:
        return None
    shown = [n for n in known if n.startswith("val_")]
    return Violation(
        key,
        name,
        f"an epoch metric of task={task}: one of {shown} (or the training values without val_)",
        f"{key}={fix or shown[-1]}",
    )
