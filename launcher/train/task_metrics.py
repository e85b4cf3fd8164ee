"""A task's metric objects, built from config: the launcher's own, Keras's by name, the person's by import path or
plugin name, each with the keyword arguments its config entry gives ({name: auc, curve: PR}).

Every metric is named once, as the config names it (`false_negatives`, not Keras's process-wide unique
`false_negatives_1`), so the train and val copies log `<name>` and `val_<name>`.

The same concept one level up: `launcher.config.tasks` (the names, no TensorFlow); `launcher.train.tasks` feeds
these objects the task's predictions.
"""

from __future__ import annotations

import re

import keras
import tensorflow as tf

from launcher.config.errors import ConfigError
from launcher.config.imports import import_component, plugin_choices
from launcher.config.raised import told
from launcher.config.tasks import TASKS, component_args, component_name, logged_name, shown, users_metric_path


@keras.saving.register_keras_serializable(package="launcher")
class Perplexity(keras.metrics.Metric):
    """exp of the mean per-token negative log-likelihood (padding excluded through sample_weight)."""

    def __init__(self, name="perplexity", **kwargs):
        super().__init__(name=name, **kwargs)
        self.nll = self.add_variable(shape=(), initializer="zeros", name="nll")
        self.tokens = self.add_variable(shape=(), initializer="zeros", name="tokens")

    def update_state(self, y_true, y_pred, sample_weight=None):
        probs = tf.cast(y_pred, tf.float32)
        picked = tf.gather(probs, tf.cast(y_true, tf.int32), batch_dims=len(y_true.shape))
        nll = -tf.math.log(tf.maximum(picked, 1e-7))
        weight = tf.ones_like(nll) if sample_weight is None else tf.cast(sample_weight, tf.float32)
        self.nll.assign_add(tf.reduce_sum(nll * weight))
        self.tokens.assign_add(tf.reduce_sum(weight))

    def result(self):
        return tf.exp(self.nll / tf.maximum(self.tokens, 1.0))


@keras.saving.register_keras_serializable(package="launcher")
class ClassAccuracy(keras.metrics.Metric):
    """Share of (unmasked) positions whose largest output is the label: two sums, the fewest ops per step.

    Takes logits or probabilities alike (argmax is the same), so the step need not compute a softmax for it.
    Keras's SparseCategoricalAccuracy gives the same value with more ops per step (measured: the default MLP
    step ran ~15% slower with it on the 2-core Xeon, benchmarks/metrics_cost.py)."""

    takes_logits = True

    def __init__(self, name="accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.correct = self.add_variable(shape=(), initializer="zeros", name="correct")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        labels = tf.cast(tf.reshape(y_true, tf.shape(y_pred)[:-1]), tf.int64)
        hits = tf.cast(tf.equal(tf.argmax(y_pred, axis=-1), labels), tf.float32)
        weight = tf.ones_like(hits) if sample_weight is None else tf.cast(sample_weight, tf.float32)
        self.correct.assign_add(tf.reduce_sum(hits * weight))
        self.count.assign_add(tf.reduce_sum(weight))

    def result(self):
        return self.correct / tf.maximum(self.count, 1.0)


# Keras metrics that score one positive class against the rest: on a classification head they need a binary head
# and are given the positive class's probability (`launcher.train.tasks.Task.update`).
POSITIVE_CLASS_METRICS = (
    keras.metrics.AUC,
    keras.metrics.Precision,
    keras.metrics.Recall,
    keras.metrics.FalseNegatives,
    keras.metrics.FalsePositives,
    keras.metrics.TrueNegatives,
    keras.metrics.TruePositives,
    keras.metrics.PrecisionAtRecall,
    keras.metrics.RecallAtPrecision,
    keras.metrics.SensitivityAtSpecificity,
    keras.metrics.SpecificityAtSensitivity,
    keras.metrics.BinaryAccuracy,
    keras.metrics.BinaryCrossentropy,
)


def scores_positive_class(metric) -> bool:
    return isinstance(metric, POSITIVE_CLASS_METRICS)


# Keras metrics that read one score per class from the output: a one-unit (binary) head has one score in all.
PER_CLASS_METRICS = (
    keras.metrics.SparseTopKCategoricalAccuracy,
    keras.metrics.SparseCategoricalCrossentropy,
    keras.metrics.SparseCategoricalAccuracy,
    keras.metrics.CategoricalCrossentropy,
    keras.metrics.CategoricalAccuracy,
    keras.metrics.TopKCategoricalAccuracy,
)


def top_k(metric) -> int | None:
    """The k of a top-k accuracy, else None."""
    if isinstance(metric, keras.metrics.SparseTopKCategoricalAccuracy | keras.metrics.TopKCategoricalAccuracy):
        return int(metric.k)
    return None


def _builtin_metric(task: str, name: str, args: dict, binary: bool):
    """A fresh metric object for a built-in name, or None when the name is not one of ours. `binary`: a
    classification head of one unit (its accuracy thresholds the positive class's probability)."""
    m = keras.metrics
    if name == "accuracy":
        if task == "multilabel" or binary:
            return m.BinaryAccuracy(name=name, **args)
        return ClassAccuracy(name=name, **args)
    factories = {
        "top5_accuracy": lambda: m.SparseTopKCategoricalAccuracy(**{"k": 5, **args}, name=name),
        "crossentropy": lambda: m.SparseCategoricalCrossentropy(name=name, **args),
        "auc": lambda: m.AUC(**{"multi_label": task == "multilabel", **args}, name=name),
        "precision": lambda: m.Precision(name=name, **args),
        "recall": lambda: m.Recall(name=name, **args),
        "binary_crossentropy": lambda: m.BinaryCrossentropy(name=name, **args),
        "mae": lambda: m.MeanAbsoluteError(name=name, **args),
        "mse": lambda: m.MeanSquaredError(name=name, **args),
        "rmse": lambda: m.RootMeanSquaredError(name=name, **args),
        "perplexity": lambda: Perplexity(name=name, **args),
    }
    return factories[name]() if name in factories else None


def make_metric(task: str, entry, key: str = "task.metrics", binary: bool = False):
    """The metric `entry` names (a name, or {name: ..., <argument>: value}) for `task`: ours, one keras.metrics
    knows, or the user's class by import path or installed plugin name (entry point group launcher.metrics), built
    with the entry's arguments; an argument it does not take is a ConfigError naming the entry."""
    name, args = component_name(entry), component_args(entry)
    try:
        metric = _metric(task, name, args, key, binary)
    except TypeError as err:
        raise ConfigError.single(
            key,
            shown(entry),
            f"arguments {name} takes ({err})",
            f"drop or rename the arguments, e.g. {key}=[{name}]",
        ) from None
    metric = _plain_name(metric)
    if logged_name(entry) != name:
        metric.name = logged_name(entry)  # its `as`
    return metric


def _metric(task: str, name: str, args: dict, key: str, binary: bool):
    path = users_metric_path(name)
    if path is not None:
        return _users_metric(path, args, key)
    metric = _builtin_metric(task, name, args, binary)
    if metric is not None:
        return metric
    found = _keras_metric(name)
    if isinstance(found, type) and issubclass(found, keras.metrics.Metric):
        return found(name=_snake(name), **args)
    if callable(found):
        return keras.metrics.MeanMetricWrapper(found, name=_snake(name), **args)
    raise ConfigError.single(
        key,
        name,
        f"a metric Keras knows: one of {list(TASKS[task].metrics)} for "
        f"task={task}, a keras.metrics name (e.g. mean_absolute_percentage_error), your own "
        f"as module.path:Class, or {plugin_choices('metric')}",
        f"{key}=[{TASKS[task].default_metrics[0]}]",
    )


def _keras_metric(name: str):
    """The class or function keras.metrics.get names `name` by, not instantiated (so nothing is built twice)."""
    from keras.src.metrics import ALL_OBJECTS_DICT

    return ALL_OBJECTS_DICT.get(name)


def _users_metric(path: str, args: dict, key: str):
    factory = import_component(key, path, "a keras.metrics.Metric class (or a function returning one)")
    if isinstance(factory, keras.metrics.Metric):
        raise ConfigError.single(
            key,
            path,
            "a Metric class or a function returning a new metric "
            "(got an instance made at import time, outside the strategy scope)",
            f"name the class itself, e.g. {path.split(':')[0]}:{type(factory).__name__}",
        )
    try:
        metric = factory(**args)
    except Exception as err:
        if args and isinstance(err, TypeError):
            raise  # an argument it does not take: named with the entry by make_metric
        raise ConfigError.single(
            key,
            path,
            f"a metric that builds with {'the arguments ' + str(args) if args else 'no arguments'} "
            "(it raised the error below)",
            "give the class defaults for its arguments",
            detail=told(err, factory),
        ) from None
    if not isinstance(metric, keras.metrics.Metric):
        raise ConfigError.single(
            key,
            path,
            f"a keras.metrics.Metric (got {type(metric).__name__})",
            "subclass keras.metrics.Metric (update_state, result, reset_state)",
        )
    return metric


def _snake(name: str) -> str:
    """A Keras class name as Keras names its instances (AUC -> auc, FalseNegatives -> false_negatives)."""
    from keras.src.utils.naming import to_snake_case

    return to_snake_case(name) if name[:1].isupper() else name


def _plain_name(metric):
    """A metric Keras named itself (no name given: its class in snake case, made unique in the process with `_1`,
    `_2`...) is named as its class, so it logs the same name in every copy, process and resume."""
    from keras.src.utils.naming import to_snake_case

    base = to_snake_case(type(metric).__name__)
    if re.fullmatch(rf"{re.escape(base)}_\d+", metric.name):
        metric.name = base
    return metric
