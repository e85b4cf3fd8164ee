"""The task's loss and metrics as Keras objects, built inside the strategy scope.

The loss is per example (the engine divides by the global batch, so replicas and workers sum to the
global mean) and always computed in float32. Metrics are Keras metric objects: created in the scope
their variables are on-read-synchronised sums, so a result read across replicas and workers is the
metric of every example, not a mean of per-replica means. They are updated outside any XLA-compiled
function (the compiled step returns its outputs) and take the task's predictions: probabilities for
classification, multilabel and sequence, the raw outputs for regression.

The same concept one level up: `launcher.config.tasks` is the table (no TensorFlow) of what each task
needs.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import keras
import numpy as np
import tensorflow as tf

from launcher.config.errors import ConfigError
from launcher.config.imports import import_component, plugin_choices
from launcher.config.raised import told
from launcher.config.tasks import TASKS, loss_name, metric_names, users_loss_path, users_metric_path


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


def _builtin_metric(task: str, name: str):
    """A fresh metric object for a built-in name, or None when the name is not one of ours."""
    m = keras.metrics
    if name == "accuracy":
        return m.BinaryAccuracy(name=name) if task == "multilabel" else ClassAccuracy(name=name)
    factories = {
        "top5_accuracy": lambda: m.SparseTopKCategoricalAccuracy(k=5, name=name),
        "crossentropy": lambda: m.SparseCategoricalCrossentropy(name=name),
        "auc": lambda: m.AUC(multi_label=True, name=name),
        "precision": lambda: m.Precision(name=name),
        "recall": lambda: m.Recall(name=name),
        "binary_crossentropy": lambda: m.BinaryCrossentropy(name=name),
        "mae": lambda: m.MeanAbsoluteError(name=name),
        "mse": lambda: m.MeanSquaredError(name=name),
        "rmse": lambda: m.RootMeanSquaredError(name=name),
        "perplexity": lambda: Perplexity(name=name),
    }
    return factories[name]() if name in factories else None


def make_metric(task: str, name: str):
    """The metric called `name` for `task`: ours, one keras.metrics knows, or the user's class by import path or
    installed plugin name (entry point group launcher.metrics)."""
    path = users_metric_path(name)
    if path is not None:
        factory = import_component("task.metrics", path, "a keras.metrics.Metric class (or a function returning one)")
        if isinstance(factory, keras.metrics.Metric):
            raise ConfigError.single(
                "task.metrics",
                path,
                "a Metric class or a function returning a new metric "
                "(got an instance made at import time, outside the strategy scope)",
                f"name the class itself, e.g. {path.split(':')[0]}:{type(factory).__name__}",
            )
        try:
            metric = factory()
        except Exception as err:
            raise ConfigError.single(
                "task.metrics",
                path,
                "a metric that builds with no arguments (it raised the error below)",
                "give the class defaults for its arguments",
                detail=told(err, factory),
            ) from None
        if not isinstance(metric, keras.metrics.Metric):
            raise ConfigError.single(
                "task.metrics",
                path,
                f"a keras.metrics.Metric (got {type(metric).__name__})",
                "subclass keras.metrics.Metric (update_state, result, reset_state)",
            )
        return metric
    metric = _builtin_metric(task, name)
    if metric is not None:
        return metric
    try:
        found = keras.metrics.get(name)
    except (ValueError, TypeError):
        found = None
    if isinstance(found, keras.metrics.Metric):
        return type(found).from_config(found.get_config())
    if callable(found):
        return keras.metrics.MeanMetricWrapper(found, name=name)
    raise ConfigError.single(
        "task.metrics",
        name,
        f"a metric Keras knows: one of {list(TASKS[task].metrics)} for "
        f"task={task}, a keras.metrics name (e.g. mean_absolute_percentage_error), your own "
        f"as module.path:Class, or {plugin_choices('metric')}",
        f"task.metrics=[{TASKS[task].default_metrics[0]}]",
    )


@dataclass
class Task:
    """What the engine asks of the task: a per-example float32 loss, predictions, metrics and their weights.

    Weights follow Keras's fit: a sample weight weighs every example's loss and metrics; class weights
    (`class_weights[class id]`) weigh the training loss and metrics only (validation is unweighted by class)."""

    name: str
    loss: object
    train_metrics: list = field(default_factory=list)
    val_metrics: list = field(default_factory=list)
    pad_id: int = 0
    class_weights: np.ndarray | None = None  # float32, one weight per class id (classification)
    class_names: tuple[str, ...] = ()  # by class id, when the data names its classes (served as the label)

    def per_example_loss(self, y, outputs, sample_weight=None, training: bool = True):
        """float32 loss per example, times its class weight (training) and sample weight."""
        weight = self.example_weights(y, sample_weight, training)
        values = self._per_example(y, outputs)
        return values if weight is None else values * weight

    def _per_example(self, y, outputs):
        outputs = tf.cast(outputs, tf.float32)
        if self.name == "regression":
            y = tf.reshape(tf.cast(y, tf.float32), tf.shape(outputs))
        elif self.name == "multilabel":
            y = tf.cast(y, tf.float32)
        values = tf.cast(self.loss(y, outputs), tf.float32)
        if self.name == "sequence":
            mask = self.mask(y)
            per_token = tf.reshape(values, tf.shape(mask))
            return tf.reduce_sum(per_token * mask, axis=-1) / tf.maximum(tf.reduce_sum(mask, axis=-1), 1.0)
        while len(values.shape) > 1:  # a user loss that returns per-element values
            values = tf.reduce_mean(values, axis=-1)
        return values

    def example_weights(self, y, sample_weight, training: bool):
        """[batch] float32: the class weight of each example's label (training only) times its sample weight;
        None when neither applies."""
        weight = None
        if training and self.class_weights is not None:
            ids = tf.reshape(tf.cast(y, tf.int32), [-1])
            weight = tf.gather(tf.constant(self.class_weights, tf.float32), ids)
        if sample_weight is not None:
            given = tf.reshape(tf.cast(sample_weight, tf.float32), [-1])
            weight = given if weight is None else weight * given
        return weight

    def mask(self, y):
        return tf.cast(tf.not_equal(tf.cast(y, tf.int32), self.pad_id), tf.float32)

    def predictions(self, outputs):
        outputs = tf.cast(outputs, tf.float32)
        if self.name in ("classification", "sequence"):
            return tf.nn.softmax(outputs)
        if self.name == "multilabel":
            return tf.sigmoid(outputs)
        return outputs

    def served(self, outputs) -> dict:
        """What a deployed model answers: the task's predictions, and the labels where the task has them (a
        classification's label is its class name when the data names classes, beside `label_id`)."""
        predictions = self.predictions(outputs)
        if self.name == "classification" and self.class_names:
            ids = tf.argmax(predictions, axis=-1, output_type=tf.int32)
            names = tf.gather(tf.constant(list(self.class_names)), ids)
            return {"probabilities": predictions, "label": names, "label_id": ids}
        if self.name in ("classification", "sequence"):
            return {"probabilities": predictions, "label": tf.argmax(predictions, axis=-1, output_type=tf.int32)}
        if self.name == "multilabel":
            return {"probabilities": predictions, "labels": tf.cast(predictions > 0.5, tf.int32)}
        return {"values": predictions}

    def update(self, metrics, y, outputs, sample_weight=None, training: bool = True) -> None:
        """Update `metrics` with one replica's batch (in replica context); the predictions (a softmax) are
        computed only when a metric needs them. Weighted as the loss is (`example_weights`)."""
        if not metrics:
            return
        needs_predictions = not all(getattr(m, "takes_logits", False) for m in metrics)
        predictions = self.predictions(outputs) if needs_predictions else tf.cast(outputs, tf.float32)
        weight = self.example_weights(y, sample_weight, training)
        if self.name == "sequence":
            mask = self.mask(y)
            weight = mask if weight is None else mask * weight[:, None]
        elif self.name == "regression":
            y = tf.reshape(tf.cast(y, tf.float32), tf.shape(predictions))
        elif self.name == "multilabel":
            y = tf.cast(y, tf.float32)
        for metric in metrics:
            metric.update_state(y, predictions, sample_weight=weight)


@keras.saving.register_keras_serializable(package="launcher")
class HeadLoss(keras.metrics.Metric):
    """One head's loss as Keras logs a model output's (`<head>_loss`): the mean over examples of its per-example
    loss, class- and sample-weighted, not multiplied by its loss_weight. Two sums, so replicas add up."""

    def __init__(self, name="loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, per_example, sample_weight=None):
        values = tf.cast(per_example, tf.float32)
        self.total.assign_add(tf.reduce_sum(values))
        self.count.assign_add(tf.cast(tf.shape(values)[0], tf.float32))

    def result(self):
        return self.total / tf.maximum(self.count, 1.0)


@dataclass
class Heads:
    """A task per model output, behind the one-head interface the engine uses (`Task`): the loss per example is
    the sum over heads of loss_weight * that head's weighted loss; each head's metrics are its own Task's, named
    `<head>_<metric>`, beside a `<head>_loss` tracker."""

    heads: dict[str, Task]  # by output name
    loss_weights: dict[str, float]
    order: list[str]  # the model's output names, in the order a list of outputs comes in
    trackers: dict[str, tuple[HeadLoss, HeadLoss]] = field(default_factory=dict)  # head -> (train, val)
    name: str = "heads"

    @property
    def train_metrics(self) -> list:
        return [m for h, task in self.heads.items() for m in (self.trackers[h][0], *task.train_metrics)]

    @property
    def val_metrics(self) -> list:
        return [m for h, task in self.heads.items() for m in (self.trackers[h][1], *task.val_metrics)]

    def by_head(self, outputs) -> dict:
        """The model's outputs by head name (a dict as is; a list or tuple in the model's output order)."""
        if isinstance(outputs, dict):
            return outputs
        return dict(zip(self.order, outputs, strict=True))

    def per_example_loss(self, y, outputs, sample_weight=None, training: bool = True):
        outputs = self.by_head(outputs)
        terms = [
            self.loss_weights[h] * task.per_example_loss(y[h], outputs[h], None, training)
            for h, task in self.heads.items()
        ]
        total = tf.add_n(terms)
        if sample_weight is None:
            return total
        return total * tf.reshape(tf.cast(sample_weight, tf.float32), [-1])

    def update(self, metrics, y, outputs, sample_weight=None, training: bool = True) -> None:
        outputs = self.by_head(outputs)
        for h, task in self.heads.items():
            tracker = self.trackers[h][0 if training else 1]
            tracker.update_state(task.per_example_loss(y[h], outputs[h], sample_weight, training))
            task.update(task.train_metrics if training else task.val_metrics, y[h], outputs[h], sample_weight, training)

    def predictions(self, outputs) -> dict:
        return {h: task.predictions(out) for h, (task, out) in self._pairs(outputs)}

    def served(self, outputs) -> dict:
        """Every head's served answer, keyed <head>_<name> (kind_probabilities, kind_label, size_values)."""
        return {f"{h}_{k}": v for h, (task, out) in self._pairs(outputs) for k, v in task.served(out).items()}

    def _pairs(self, outputs):
        outputs = self.by_head(outputs)
        return [(h, (task, outputs[h])) for h, task in self.heads.items()]


def _loss(task: str, requested: str):
    name = loss_name(task, requested)
    path = users_loss_path(name)
    if path is not None:
        return _user_loss(path)
    losses = keras.losses
    if name == "crossentropy":
        return losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    if name == "binary_crossentropy":
        return lambda y, logits: tf.reduce_mean(
            tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits), axis=-1
        )
    return {"mse": losses.MeanSquaredError, "mae": losses.MeanAbsoluteError, "huber": losses.Huber}[name](
        reduction=None
    )


def _user_loss(path: str):
    """A keras Loss class (instantiated unreduced), or a function (y_true, y_pred) -> per-example values."""
    found = import_component(
        "task.loss", path, "a function (y_true, y_pred) -> loss per example, or a keras Loss class"
    )
    if isinstance(found, type) and issubclass(found, keras.losses.Loss):
        try:
            return found(reduction=None)
        except TypeError as err:
            raise ConfigError.single(
                "task.loss",
                path,
                f"a Loss class that accepts reduction=None ({err})",
                "pass **kwargs through to keras.losses.Loss.__init__",
            ) from None
    if isinstance(found, keras.losses.Loss):
        found.reduction = None
        return found
    if not callable(found):
        raise ConfigError.single(
            "task.loss",
            path,
            f"a callable loss (got {type(found).__name__})",
            "point task.loss at a function def my_loss(y_true, y_pred)",
        )

    try:
        inspect.signature(found).bind(None, None)
    except (TypeError, ValueError) as err:
        raise ConfigError.single(
            "task.loss",
            path,
            f"a function taking (y_true, y_pred) ({err})",
            "def my_loss(y_true, y_pred): return per-example values",
        ) from None
    return found


def make_task(cfg, source=None, widths: dict[str, int] | None = None, training: bool = True) -> Task | Heads:
    """The task's loss and its metrics (a set for training and one for validation), one Task per head under
    task.heads. Inside the strategy scope. `source` (the data) gives balanced class weights their training
    labels; `widths` (output name -> units, "" for one output) the class weights' length. Class weights weigh
    training only: for evaluation (`training=False`) they are not computed (balanced ones read every label)."""
    widths = widths or {}

    def weights_of(class_weight, key: str, head: str | None):
        if not training:
            return None
        return class_weight_vector(class_weight, key, source, head, widths.get(head or "", 0))

    if not getattr(cfg, "heads", None):
        task = _name(cfg.name)
        weights = weights_of(cfg.class_weight, "task.class_weight", None)
        names = class_names_of(source, None, widths.get("", 0))
        return _task(task, cfg.loss, cfg.metrics, "task", "", cfg.pad_id, weights, names)
    heads, loss_weights, trackers = {}, {}, {}
    for head, hc in cfg.heads.items():
        key = f"task.heads.{head}"
        weights = weights_of(hc.class_weight, f"{key}.class_weight", head)
        names = class_names_of(source, head, widths.get(head, 0))
        heads[head] = _task(_name(hc.name), hc.loss, hc.metrics, key, head, cfg.pad_id, weights, names)
        loss_weights[head] = float(hc.loss_weight)
        trackers[head] = (HeadLoss(name=f"{head}_loss"), HeadLoss(name=f"{head}_loss"))
    order = [h for h in widths if h in heads] if set(heads) <= set(widths) else list(heads)
    return Heads(heads, loss_weights, order, trackers)


def _name(name) -> str:
    return name.value if hasattr(name, "value") else str(name)


def class_names_of(source, head: str | None, width: int = 0) -> tuple[str, ...]:
    """The data's class names for one head (`head` None: the one task), () when it names none; a name per class
    of the output's `width` units, or a ConfigError."""
    names = getattr(source, "class_names", ()) or ()
    if isinstance(names, dict):
        names = tuple(str(n) for n in names.get(head, ())) if head else ()
    else:
        names = tuple(str(n) for n in names) if head is None else ()
    if names and width and len(names) != width:
        raise ConfigError.single(
            "dataset" + (f" class_names[{head!r}]" if head else " class_names"),
            list(names),
            f"a name for each of the output's {width} classes ({len(names)} given)",
            f"give {width} names, in class id order (or dataset.num_classes={len(names)} when the labels seen so far "
            "do not show every class)",
        )
    return names


def _task(task: str, loss: str, requested, key: str, head: str, pad_id: int, weights, classes=()) -> Task:
    names = metric_names(task, requested)
    train = [_named(make_metric(task, n), head) for n in names]
    val = [_named(make_metric(task, n), head) for n in names]
    logged = [m.name for m in train]
    clash = sorted({n for n in logged if logged.count(n) > 1 or n == "loss" or n == f"{head}_loss"})
    if clash:
        raise ConfigError.single(
            f"{key}.metrics",
            list(requested),
            f"metrics with distinct names other than loss ({clash} appear twice or shadow the loss)",
            "give each metric its own name",
        )
    return Task(task, _loss(task, loss), train, val, pad_id, weights, classes if task == "classification" else ())


def _named(metric, head: str):
    """A head's metric is logged as Keras names a model output's: <head>_<metric>."""
    if head:
        metric.name = f"{head}_{metric.name}"
    return metric


def class_weight_vector(requested, key: str, source, head: str | None, width: int) -> np.ndarray | None:
    """float32 weight per class id: balanced (n / (classes present * count), from the training labels) or the
    requested mapping (a class not named weighs 1); None without class weights. `width`: the output's units."""
    if requested is None or requested == "":
        return None
    if isinstance(requested, str):  # balanced (the resolver refused anything else)
        labels = train_labels(source, head).astype(np.int64)
        counts = np.bincount(labels, minlength=max(width, 1))
        present = counts > 0
        balanced = labels.size / (present.sum() * np.maximum(counts, 1))
        return np.where(present, balanced, 1.0).astype(np.float32)
    mapping = {int(str(c)): float(w) for c, w in dict(requested).items()}
    beyond = sorted(c for c in mapping if width and c >= width)
    if beyond:
        raise ConfigError.single(
            key,
            {c: mapping[c] for c in beyond},
            f"class ids the output has: 0..{width - 1} ({width} units)",
            f"drop {beyond} from {key}, or widen the output",
        )
    vector = np.ones(max(width, max(mapping) + 1), np.float32)
    for c, w in mapping.items():
        vector[c] = w
    return vector


def train_labels(source, head: str | None) -> np.ndarray:
    """The training split's labels (one head's under task.heads), flattened: what balanced weights count."""
    data = source.split("train") if source is not None else None
    if data is None:
        raise ConfigError.single(
            "task.class_weight", "balanced", "training labels to count", "give the class weights as a mapping"
        )
    if isinstance(data, tuple | list):
        y = data[1]
        y = y[head] if head else y
        return np.asarray(y).reshape(-1)
    labels = data.map(lambda *example: example[1][head] if head else example[1]).batch(8192)
    return np.concatenate([np.asarray(batch).reshape(-1) for batch in labels.as_numpy_iterator()])
