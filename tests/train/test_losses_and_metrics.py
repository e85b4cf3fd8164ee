"""Losses and metrics as Keras users write them, built from config in-process (no launch): arguments from config,
a keras.io Loss class without `reduction`, metric names without Keras's `_1`, `[none]`, what the model's outputs
are (`launcher.train.outputs`) and what the task serves for them.

The objects: `launcher.train.losses`, `launcher.train.task_metrics`; fed and served by `launcher.train.tasks`.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from support.config import config

from launcher.config.errors import ConfigError
from launcher.train.losses import make_loss
from launcher.train.outputs import output_activations, takes_logits
from launcher.train.task_metrics import make_metric
from launcher.train.tasks import Task, make_task

FOCAL = "binary_parts:FocalLoss"
Y = np.array([0.0, 1.0, 1.0, 0.0], "float32")[:, None]
P = np.array([0.2, 0.9, 0.4, 0.6], "float32")[:, None]


def test_a_keras_io_loss_class_without_reduction_takes_its_arguments_from_config_and_is_per_example():
    focal = make_loss("classification", {"name": FOCAL, "gamma": 3.0}, from_logits=False, binary=True)
    assert focal.gamma == 3.0 and focal.reduction is None
    per_example = focal(Y, P)
    assert per_example.shape == (4,)
    # gamma 0 is plain binary crossentropy, example by example.
    plain = make_loss("classification", {"name": FOCAL, "gamma": 0.0}, from_logits=False, binary=True)
    expected = keras.losses.BinaryCrossentropy(reduction=None)(Y, P)
    np.testing.assert_allclose(plain(Y, P), expected, rtol=1e-5)


def test_a_loss_functions_arguments_and_a_built_in_losss_arguments_come_from_config():
    weighted = make_loss("classification", {"name": "binary_parts:weighted_crossentropy", "positive_weight": 4.0})
    plain = make_loss("classification", "binary_parts:weighted_crossentropy")
    loss_of = np.asarray(weighted(Y, P)), np.asarray(plain(Y, P))
    np.testing.assert_allclose(loss_of[0][Y[:, 0] == 1], 4 * loss_of[1][Y[:, 0] == 1], rtol=1e-5)
    np.testing.assert_allclose(loss_of[0][Y[:, 0] == 0], loss_of[1][Y[:, 0] == 0], rtol=1e-5)
    huber = make_loss("regression", {"name": "huber", "delta": 0.25})
    y, pred = np.zeros((1, 1), "float32"), np.ones((1, 1), "float32")
    assert float(huber(y, pred)[0]) == pytest.approx(0.25 * (1 - 0.5 * 0.25))  # linear beyond delta


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ({"name": FOCAL, "gama": 2.0}, "gama"),
        ({"name": "binary_parts:weighted_crossentropy", "weight": 2.0}, "weight"),
        ({"name": "huber", "delta_": 1.0}, "delta_"),
    ],
)
def test_an_argument_the_loss_does_not_take_is_refused_naming_the_key_and_the_entry(entry, named):
    task = "regression" if entry["name"] == "huber" else "classification"
    with pytest.raises(ConfigError) as err:
        make_loss(task, entry, "task.loss")
    (problem,) = err.value.violations
    assert problem.key == "task.loss" and named in str(problem.value) and problem.fix


def test_metric_arguments_from_config_reach_the_keras_object():
    auc = make_metric("classification", {"name": "auc", "curve": "PR"})
    assert isinstance(auc, keras.metrics.AUC) and auc.curve.name == "PR" and auc.name == "auc"
    precision = make_metric("classification", {"name": "precision", "thresholds": 0.3})
    assert precision.thresholds == [0.3]
    counts = make_metric("classification", {"name": "FalseNegatives", "thresholds": [0.2, 0.5]})
    assert counts.name == "false_negatives" and list(counts.thresholds) == [0.2, 0.5]
    prc = make_metric("classification", {"name": "auc", "curve": "PR", "as": "prc"})
    assert prc.name == "prc" and prc.curve.name == "PR"
    with pytest.raises(ConfigError, match="arguments auc takes") as err:
        make_metric("classification", {"name": "auc", "curv": "PR"}, "task.heads.churn.metrics")
    assert err.value.violations[0].key == "task.heads.churn.metrics"


def test_keras_metric_objects_log_as_named_never_with_a_process_wide_suffix():
    built = make_task(
        config("task.metrics=[false_negatives,TruePositives,binary_parts:PositiveRate]").task,
        widths={"": 1},
    )
    again = make_task(config("task.metrics=[false_negatives,binary_parts:PositiveRate]").task, widths={"": 1})
    names = [m.name for m in built.train_metrics]
    assert names == [m.name for m in built.val_metrics] == ["false_negatives", "true_positives", "positive_rate"]
    assert [m.name for m in again.val_metrics] == ["false_negatives", "positive_rate"]


def test_metrics_none_switches_the_defaults_off_and_empty_keeps_them():
    assert make_task(config("task=regression", "task.metrics=[none]").task).train_metrics == []
    assert [m.name for m in make_task(config("task=regression").task).train_metrics] == ["mae", "rmse"]


def test_positive_class_metrics_on_a_head_of_many_classes_are_refused_with_a_fix():
    with pytest.raises(ConfigError) as err:
        make_task(config("task.metrics=[accuracy,precision]").task, widths={"": 5})
    (problem,) = err.value.violations
    assert (
        problem.key == "task.metrics"
        and "binary head" in problem.expected
        and problem.fix == "task.metrics=[accuracy], or a binary head"
    )


def test_metrics_reading_a_score_per_class_are_refused_on_a_one_unit_head_and_top_k_needs_more_classes():
    with pytest.raises(ConfigError) as err:
        make_task(config("task.metrics=[accuracy,crossentropy,top5_accuracy]").task, widths={"": 1})
    (problem,) = err.value.violations
    assert problem.value == ["crossentropy", "top5_accuracy"] and "one-unit (binary) head" in problem.expected
    assert problem.fix.startswith("task.metrics=[accuracy,binary_crossentropy]")
    with pytest.raises(ConfigError, match=r"k below this head's 4 classes") as err:
        make_task(config("task.metrics=[accuracy,top5_accuracy]").task, widths={"": 4})
    assert err.value.violations[0].fix == "drop it, or {name: top5_accuracy, k: 3}"
    kept = make_task(config("task.metrics=[accuracy,{name:top5_accuracy,k:3}]").task, widths={"": 4})
    assert [m.name for m in kept.train_metrics] == ["accuracy", "top5_accuracy"]


def _model(last):
    inputs = keras.Input((3,))
    return keras.Model(inputs, last(keras.layers.Dense(4)(inputs)))


def test_the_outputs_kind_is_read_from_the_last_layer_through_a_float32_layer():
    cases = {
        "softmax": lambda x: keras.layers.Dense(2, activation="softmax")(x),
        "sigmoid": lambda x: keras.layers.Activation("sigmoid")(x),
        "softmax ": lambda x: keras.layers.Softmax()(x),
        "sigmoid (float32 layer after)": lambda x: keras.layers.Activation("linear", dtype="float32")(
            keras.layers.Dense(1, activation="sigmoid")(x)
        ),
        "": lambda x: keras.layers.Dense(2)(x),
    }
    for said, last in cases.items():
        (activation,) = output_activations(_model(last)).values()
        assert activation == said.split(" ")[0], said
    assert takes_logits("auto", "") and not takes_logits("auto", "softmax")
    assert takes_logits("logits", "softmax") and not takes_logits("probabilities", "")


def test_probabilities_are_served_as_the_model_gives_them_and_logits_after_the_softmax():
    probs = tf.constant([[0.2, 0.8], [0.7, 0.3]])
    as_given = Task("classification", None, from_logits=False, units=2).served(probs)
    np.testing.assert_allclose(as_given["probabilities"], probs)
    assert list(as_given["label"].numpy()) == [1, 0]
    logits = Task("classification", None).served(tf.math.log(probs))
    np.testing.assert_allclose(logits["probabilities"], probs, rtol=1e-5)
    one = Task("classification", None, from_logits=False, units=1, class_names=("ok", "fraud"))
    served = one.served(tf.constant([[0.9], [0.1]]))
    assert list(served["label_id"].numpy()) == [1, 0] and list(served["label"].numpy()) == [b"fraud", b"ok"]


def test_a_one_logit_binary_head_takes_binary_crossentropy_class_weights_and_a_threshold():
    built = make_task(
        config("task.metrics=[accuracy,precision]", "task.class_weight={0: 1, 1: 3}").task,
        source=None,
        widths={"": 1},
    )
    logits, labels = tf.constant([[2.0], [-1.0], [0.5]]), tf.constant([1, 0, 0])
    per_example = built.per_example_loss(labels, logits)
    plain = keras.losses.BinaryCrossentropy(from_logits=True, reduction=None)(
        tf.constant([[1.0], [0.0], [0.0]]), logits
    )
    np.testing.assert_allclose(per_example, plain * np.array([3.0, 1.0, 1.0]), rtol=1e-5)
    built.update(built.val_metrics, labels, logits, training=False)
    accuracy, precision = (float(m.result()) for m in built.val_metrics)
    assert accuracy == pytest.approx(2 / 3) and precision == pytest.approx(1 / 2)
    assert list(built.served(logits)["label"].numpy()) == [1, 0, 1]
