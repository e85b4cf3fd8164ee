"""A keras.io imbalanced-classification project as its author writes it (a model ending in sigmoid or softmax, a
focal Loss class without `reduction` and its gamma from config, class weights, precision / recall / PR-AUC / false
negatives) trains in-process through the real config, resolver, build and engine, and every validation metric is
the number plain Keras `evaluate` gives for the trained model on the same data.

The pieces: `launcher.train.outputs` (probabilities read from the last layer), `launcher.train.losses`,
`launcher.train.task_metrics`, `launcher.train.tasks`.
"""

from __future__ import annotations

import binary_parts
import keras
import numpy as np
import pytest
from support.config import TINY, compose

from launcher.launch.training import execute

METRICS = "task.metrics=[precision,recall,{name:auc,curve:PR},{name:false_negatives,thresholds:0.3}]"


def _launch(tmp_path, *overrides):
    cfg = compose(
        *[o for o in TINY if not o.startswith("model.")],
        "model=custom",
        "dataset=custom",
        "dataset.loader=binary_parts:load",
        "task.class_weight={0: 1.0, 1: 4.0}",
        "precision=fp32",
        *overrides,
        "tracking.enabled=false",
        "checkpoint.enabled=false",
        "checkpoint.export_model=false",
    )
    outcome = execute(cfg, tmp_path / "run", tmp_path)
    assert outcome.error is None
    return outcome


def _keras_metrics():
    return [
        keras.metrics.Precision(),
        keras.metrics.Recall(),
        keras.metrics.AUC(curve="PR"),
        keras.metrics.FalseNegatives(thresholds=0.3),
    ]


@pytest.mark.slow  # two short trainings in this process
def test_a_sigmoid_model_with_a_focal_loss_class_logs_what_plain_keras_evaluate_gives(tmp_path):
    outcome = _launch(
        tmp_path,
        "model.builder=binary_parts:build_sigmoid",
        "task.loss={name:'binary_parts:FocalLoss',gamma:2.0}",
        METRICS,
    )
    logs = outcome.result.epochs[-1].logs
    plan = outcome.plan.values()
    assert plan["task.outputs"] == "probabilities (its last layer is a sigmoid)"
    assert plan["task.class_weights"] == {"task": [1.0, 4.0]}
    model = outcome.model
    model.compile(loss=binary_parts.FocalLoss(gamma=2.0), metrics=_keras_metrics())
    x, y = binary_parts.load()["val"]
    stock = model.evaluate(x, y.reshape(-1, 1), batch_size=64, verbose=0, return_dict=True)
    for name in ("loss", "precision", "recall", "auc", "false_negatives"):
        assert logs[f"val_{name}"] == pytest.approx(stock[name], rel=1e-4, abs=1e-5), name
    assert not any(key.endswith("_1") for key in logs), sorted(logs)


@pytest.mark.slow
def test_a_two_class_softmax_model_gives_positive_class_metrics_and_keras_accuracy_and_loss(tmp_path):
    outcome = _launch(tmp_path, "model.builder=binary_parts:build_softmax", f"{METRICS[:-1]},accuracy]")
    logs = outcome.result.epochs[-1].logs
    assert outcome.plan.values()["task.outputs"] == "probabilities (its last layer is a softmax)"
    model = outcome.model
    model.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    x, y = binary_parts.load()["val"]
    stock = model.evaluate(x, y, batch_size=64, verbose=0, return_dict=True)
    assert logs["val_loss"] == pytest.approx(stock["loss"], rel=1e-4)
    assert logs["val_accuracy"] == pytest.approx(stock["accuracy"], abs=1e-6)
    positive = model.predict(x, verbose=0)[:, 1:]  # the positive class's probability, as the launcher gives it
    for name, metric in zip(("precision", "recall", "auc", "false_negatives"), _keras_metrics(), strict=True):
        metric.update_state(y.reshape(-1, 1), positive)
        assert logs[f"val_{name}"] == pytest.approx(float(np.asarray(metric.result())), rel=1e-4, abs=1e-5), name
