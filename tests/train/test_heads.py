"""A task per model output: the weighted per-head loss against a hand computation, per-head metric names and
weights, class weights (balanced from the labels, or a mapping), and the per-head refusals at build."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from support.config import config

from launcher.config.errors import ConfigError
from launcher.train.tasks import Heads, Task, class_weight_vector, make_task

HEADS = (
    "+task.heads={kind: {name: classification, metrics: [accuracy], class_weight: {0: 1.0, 1: 3.0}}, "
    "size: {name: regression, loss_weight: 0.5, metrics: [mae]}}"
)
# Two examples, two heads: logits over two classes for `kind`, one real target for `size`.
LOGITS = np.array([[2.0, 0.0], [0.0, 1.0]], np.float32)
KIND = np.array([0, 1])
SIZE_OUT = np.array([[1.0], [3.0]], np.float32)
SIZE = np.array([2.0, 1.0], np.float32)
WEIGHT = np.array([1.0, 0.5], np.float32)


def _xent(logits, label):
    return float(-np.log(np.exp(logits[label]) / np.exp(logits).sum()))


def _heads():
    return make_task(config(HEADS).task, None, {"kind": 2, "size": 1})


def test_the_loss_sums_weighted_heads_per_example_times_the_sample_weight():
    task = _heads()
    assert isinstance(task, Heads)
    y = {"kind": KIND, "size": SIZE}
    outputs = {"kind": LOGITS, "size": SIZE_OUT}
    got = task.per_example_loss(y, outputs, WEIGHT, training=True).numpy()
    class_weight = [1.0, 3.0]
    hand = [
        WEIGHT[i] * (class_weight[KIND[i]] * _xent(LOGITS[i], KIND[i]) + 0.5 * (SIZE_OUT[i, 0] - SIZE[i]) ** 2)
        for i in range(2)
    ]
    np.testing.assert_allclose(got, hand, rtol=1e-5)
    assert got.dtype == np.float32
    # Validation: sample weights count, class weights do not (as Keras's fit(class_weight=)).
    val = task.per_example_loss(y, outputs, WEIGHT, training=False).numpy()
    hand_val = [WEIGHT[i] * (_xent(LOGITS[i], KIND[i]) + 0.5 * (SIZE_OUT[i, 0] - SIZE[i]) ** 2) for i in range(2)]
    np.testing.assert_allclose(val, hand_val, rtol=1e-5)


def test_a_list_of_outputs_is_taken_in_the_models_output_order():
    task = make_task(config(HEADS).task, None, {"size": 1, "kind": 2})  # the model lists size first
    y = {"kind": KIND, "size": SIZE}
    by_list = task.per_example_loss(y, [SIZE_OUT, LOGITS], None).numpy()
    by_dict = task.per_example_loss(y, {"kind": LOGITS, "size": SIZE_OUT}, None).numpy()
    np.testing.assert_allclose(by_list, by_dict)


def test_metrics_are_named_per_head_and_weighted_by_class_and_sample_weights():
    task = _heads()
    assert [m.name for m in task.train_metrics] == ["kind_loss", "kind_accuracy", "size_loss", "size_mae"]
    assert [m.name for m in task.val_metrics] == ["kind_loss", "kind_accuracy", "size_loss", "size_mae"]
    y = {"kind": KIND, "size": SIZE}
    outputs = {"kind": np.array([[2.0, 0.0], [1.0, 0.0]], np.float32), "size": SIZE_OUT}  # second kind wrong
    task.update(task.train_metrics, y, outputs, WEIGHT, training=True)
    got = {m.name: float(m.result()) for m in task.train_metrics}
    # accuracy weighted by class weight x sample weight: hit 1*1.0, miss 3*0.5
    assert got["kind_accuracy"] == pytest.approx(1.0 / (1.0 + 1.5))
    assert got["size_mae"] == pytest.approx((1.0 * 1.0 + 0.5 * 2.0) / 1.5)
    # <head>_loss: the mean over examples of the weighted head loss, not multiplied by loss_weight (Keras's).
    assert got["size_loss"] == pytest.approx((1.0 * 1.0 + 0.5 * 4.0) / 2)
    task.update(task.val_metrics, y, outputs, None, training=False)
    val = {m.name: float(m.result()) for m in task.val_metrics}
    assert val["kind_accuracy"] == pytest.approx(0.5)  # no class weights in validation


def test_one_head_class_weight_weighs_its_loss_and_keeps_todays_metric_names():
    task = make_task(config("task.class_weight={1: 4.0}").task, None, {"": 2})
    assert isinstance(task, Task) and [m.name for m in task.train_metrics] == ["accuracy"]
    got = task.per_example_loss(KIND, LOGITS, None).numpy()
    np.testing.assert_allclose(got, [_xent(LOGITS[0], 0), 4.0 * _xent(LOGITS[1], 1)], rtol=1e-5)


def test_without_weights_a_one_head_loss_is_as_before():
    task = make_task(config().task)
    np.testing.assert_allclose(
        task.per_example_loss(KIND, LOGITS).numpy(), [_xent(LOGITS[0], 0), _xent(LOGITS[1], 1)], rtol=1e-5
    )


class _Source:
    def __init__(self, y):
        self.train = (np.zeros((len(y["kind"]), 3), np.float32), y)

    def split(self, name):
        return self.train


def test_balanced_class_weights_are_n_over_classes_times_count_from_the_training_labels():
    labels = np.array([0, 0, 0, 1, 2, 2])
    source = _Source({"kind": labels})
    got = class_weight_vector("balanced", "task.heads.kind.class_weight", source, "kind", 4)
    np.testing.assert_allclose(got, [6 / (3 * 3), 6 / (3 * 1), 6 / (3 * 2), 1.0], rtol=1e-6)
    ds_source = _Source({"kind": labels})
    ds_source.train = tf.data.Dataset.from_tensor_slices((np.zeros((6, 3)), {"kind": labels}, np.ones(6)))
    np.testing.assert_allclose(class_weight_vector("balanced", "k", ds_source, "kind", 4), got)


def test_a_class_weight_for_a_class_the_output_lacks_is_refused():
    with pytest.raises(ConfigError, match=r"task\.class_weight.*0\.\.1") as err:
        class_weight_vector({5: 2.0}, "task.class_weight", None, None, 2)
    assert "drop [5]" in str(err.value)
