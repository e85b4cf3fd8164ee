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

from dataclasses import dataclass, field

import keras
import numpy as np
import tensorflow as tf

from launcher.config.errors import ConfigError
from launcher.config.tasks import NO_METRICS, TASKS, component_name
from launcher.train.losses import make_loss
from launcher.train.outputs import takes_logits
from launcher.train.task_metrics import (
    PER_CLASS_METRICS,
    ClassAccuracy,
    Perplexity,
    make_metric,
    scores_positive_class,
    top_k,
)

__all__ = ["ClassAccuracy", "Heads", "Perplexity", "Task", "make_task"]  # the metric classes' old import path


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
    from_logits: bool = True  # the model's outputs are logits; False: probabilities (it ends in softmax/sigmoid)
    units: int = 0  # the output's width, when known: a classification head of 1 unit is binary (one sigmoid/logit)

    @property
    def one_unit(self) -> bool:
        """A binary classification head of one unit: the positive class's logit or probability."""
        return self.name == "classification" and self.units == 1

    def per_example_loss(self, y, outputs, sample_weight=None, training: bool = True):
        """float32 loss per example, times its class weight (training) and sample weight."""
        weight = self.example_weights(y, sample_weight, training)
        values = self._per_example(y, outputs)
        return values if weight is None else values * weight

    def _per_example(self, y, outputs):
        outputs = tf.cast(outputs, tf.float32)
        if self.name == "regression" or self.one_unit:
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
        """Probabilities (the model's own when it ends in softmax or sigmoid), or a regression's values."""
        outputs = tf.cast(outputs, tf.float32)
        if not self.from_logits or self.name == "regression":
            return outputs
        if self.name == "multilabel" or self.one_unit:
            return tf.sigmoid(outputs)
        return tf.nn.softmax(outputs)

    def label_ids(self, predictions):
        if self.one_unit:  # the positive class when its probability is over one half
            return tf.cast(tf.reshape(predictions, [-1]) > 0.5, tf.int32)
        return tf.argmax(predictions, axis=-1, output_type=tf.int32)

    def served(self, outputs) -> dict:
        """What a deployed model answers: the task's predictions, and the labels where the task has them (a
        classification's label is its class name when the data names classes, beside `label_id`)."""
        predictions = self.predictions(outputs)
        if self.name == "classification" and self.class_names:
            ids = self.label_ids(predictions)
            names = tf.gather(tf.constant(list(self.class_names)), ids)
            return {"probabilities": predictions, "label": names, "label_id": ids}
        if self.name in ("classification", "sequence"):
            return {"probabilities": predictions, "label": self.label_ids(predictions)}
        if self.name == "multilabel":
            return {"probabilities": predictions, "labels": tf.cast(predictions > 0.5, tf.int32)}
        return {"values": predictions}

    def update(self, metrics, y, outputs, sample_weight=None, training: bool = True) -> None:
        """Update `metrics` with one replica's batch (in replica context); the predictions (a softmax of logits)
        are computed only when a metric needs them. Weighted as the loss is (`example_weights`). On a two-class
        head the metrics that score one positive class (precision, recall, AUC, the confusion counts) get class
        1's probability and 0/1 labels."""
        if not metrics:
            return
        needs_predictions = not all(getattr(m, "takes_logits", False) for m in metrics)
        predictions = self.predictions(outputs) if needs_predictions else tf.cast(outputs, tf.float32)
        weight = self.example_weights(y, sample_weight, training)
        if self.name == "sequence":
            mask = self.mask(y)
            weight = mask if weight is None else mask * weight[:, None]
        elif self.name == "regression" or self.one_unit:
            y = tf.reshape(tf.cast(y, tf.float32), tf.shape(predictions))
        elif self.name == "multilabel":
            y = tf.cast(y, tf.float32)
        for metric in metrics:
            if self.name == "classification" and self.units == 2 and scores_positive_class(metric):
                positive = predictions[:, 1:]
                metric.update_state(tf.reshape(tf.cast(y, tf.float32), tf.shape(positive)), positive, weight)
            else:
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


def make_task(
    task_config,
    source=None,
    widths: dict[str, int] | None = None,
    training: bool = True,
    activations: dict | None = None,
) -> Task | Heads:
    """The task's loss and its metrics (a set for training and one for validation), one Task per head under
    task.heads. Inside the strategy scope. `source` (the data) gives balanced class weights their training
    labels; `widths` (output name -> units, "" for one output) the class weights' length. Class weights weigh
    training only: for evaluation (`training=False`) they are not computed (balanced ones read every label).
    `activations` (output name -> its last activation, `launcher.train.outputs`; "" for one output) says which
    outputs are probabilities."""
    widths, activations = widths or {}, activations or {}

    def weights_of(class_weight, key: str, head: str | None, task: str):
        if not training:
            return None
        return class_weight_vector(class_weight, key, source, head, _classes(task, widths.get(head or "", 0)))

    if not getattr(task_config, "heads", None):
        task = _name(task_config.name)
        weights = weights_of(task_config.class_weight, "task.class_weight", None, task)
        names = class_names_of(source, None, _classes(task, widths.get("", 0)))
        shape = (widths.get("", 0), activations.get("", ""))
        return _task(task_config, "task", "", weights, names, shape)
    heads, loss_weights, trackers = {}, {}, {}
    for head, hc in task_config.heads.items():
        key = f"task.heads.{head}"
        weights = weights_of(hc.class_weight, f"{key}.class_weight", head, _name(hc.name))
        names = class_names_of(source, head, _classes(_name(hc.name), widths.get(head, 0)))
        shape = (widths.get(head, 0), activations.get(head, ""))
        heads[head] = _task(hc, key, head, weights, names, shape, task_config.pad_id)
        loss_weights[head] = float(hc.loss_weight)
        trackers[head] = (HeadLoss(name=f"{head}_loss"), HeadLoss(name=f"{head}_loss"))
    order = [h for h in widths if h in heads] if set(heads) <= set(widths) else list(heads)
    return Heads(heads, loss_weights, order, trackers)


def _classes(task: str, width: int) -> int:
    """The classes an output of `width` units tells apart: a one-unit classification head is binary."""
    return 2 if task == "classification" and width == 1 else width


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


def _task(tc, key: str, head: str, weights, classes, shape: tuple[int, str], pad_id: int | None = None) -> Task:
    """One head's Task from its config `tc` (the task, or one of task.heads); `shape`: (the output's units, its
    last activation)."""
    task = _name(tc.name)
    units, activation = shape
    from_logits = takes_logits(_name(getattr(tc, "outputs", "auto")), activation)
    binary = task == "classification" and units == 1
    entries = [e for e in tc.metrics or () if component_name(e) != NO_METRICS] or (
        [] if tc.metrics else list(TASKS[task].default_metrics)
    )
    train = [_named(make_metric(task, e, f"{key}.metrics", binary), head) for e in entries]
    val = [_named(make_metric(task, e, f"{key}.metrics", binary), head) for e in entries]
    _check_positive_class(train, task, units, f"{key}.metrics")
    _check_class_scores(train, task, units, f"{key}.metrics")
    logged = [m.name for m in train]
    clash = sorted({n for n in logged if logged.count(n) > 1 or n == "loss" or n == f"{head}_loss"})
    if clash:
        raise ConfigError.single(
            f"{key}.metrics",
            list(tc.metrics),
            f"metrics with distinct names other than loss ({clash} appear twice or shadow the loss)",
            "give each metric its own name with `as` in its entry ({name: auc, curve: PR, as: pr_auc})",
        )
    loss = make_loss(task, tc.loss, f"{key}.loss", from_logits, binary)
    return Task(
        task,
        loss,
        train,
        val,
        tc.pad_id if pad_id is None else pad_id,
        weights,
        classes if task == "classification" else (),
        from_logits,
        units,
    )


def _check_positive_class(metrics: list, task: str, units: int, key: str) -> None:
    """Precision, recall, AUC and the confusion counts score one positive class: a classification head must be
    binary (one unit, or two classes) for them."""
    scoring = [m.name for m in metrics if scores_positive_class(m)]
    if task == "classification" and units > 2 and scoring:
        raise ConfigError.single(
            key,
            scoring,
            f"metrics of a binary head (one sigmoid or logit unit, or two classes): {scoring} score one positive "
            f"class, and this head has {units} classes",
            f"{key}=[accuracy], or a binary head",
        )


def _check_class_scores(metrics: list, task: str, units: int, key: str) -> None:
    """Metrics that read a score per class: a one-unit head has a single score (its metrics are the binary ones),
    and a top-k accuracy needs more than k classes (else it is 1.0 whatever the model says)."""
    if task != "classification":
        return
    per_class = [m.name for m in metrics if isinstance(m, PER_CLASS_METRICS)]
    if units == 1 and per_class:
        raise ConfigError.single(
            key,
            per_class,
            f"metrics of a one-unit (binary) head: {per_class} read a score per class, and this head has one",
            f"{key}=[accuracy,binary_crossentropy] (or a head of one unit per class)",
        )
    always = [m.name for m in metrics if top_k(m) is not None and top_k(m) >= units > 1]
    if always:
        raise ConfigError.single(
            key,
            always,
            f"a top-k accuracy with k below this head's {units} classes (with k >= {units} it is 1.0 whatever the "
            "model answers)",
            f"drop it, or {{name: top5_accuracy, k: {max(1, units - 1)}}}",
        )


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
