"""Losses and metrics with arguments from config, `metrics: [none]`, binary metrics and `task.outputs`: the task
rule (`launcher.plan.rules.task`) against a fake environment, and the MLflow params (`launcher.launch.params`),
before TensorFlow loads."""

from __future__ import annotations

import pytest
from fakes import CPU_PLAIN
from support.config import config

from launcher.config.errors import ConfigError
from launcher.config.schema import as_dict
from launcher.launch.params import run_params
from launcher.plan.resolve import resolve

FOCAL = "task.loss={name:'binary_parts:FocalLoss',gamma:2.0}"
PR_AUC = "task.metrics=[{name:auc,curve:PR},precision,false_negatives]"


def refused(*overrides) -> dict:
    with pytest.raises(ConfigError) as err:
        resolve(config(*overrides), CPU_PLAIN)
    return {v.key: v for v in err.value.violations}


def test_arguments_are_recorded_in_the_plan_and_the_params_and_sweep_like_any_key():
    cfg = config(FOCAL, PR_AUC, "task.loss.gamma=3")
    plan = resolve(cfg, CPU_PLAIN)
    assert plan.task.loss == "binary_parts:FocalLoss(gamma=3)"
    assert plan.task.metrics == ["auc", "precision", "false_negatives"]
    assert plan.task.arguments == {"loss": {"gamma": 3}, "metrics": {"auc": {"curve": "PR"}}}
    params = run_params(as_dict(cfg), plan)
    assert params["task.loss.name"] == "binary_parts:FocalLoss" and params["task.loss.gamma"] == 3
    # The string form is as it was: no arguments in the Plan.
    plain = resolve(config("task.loss=crossentropy"), CPU_PLAIN)
    assert plain.task.loss == "crossentropy" and plain.task.arguments is None


def test_two_metrics_of_one_kind_log_side_by_side_under_their_as_names_or_are_refused():
    """keras.io logs AUC(name="auc") and AUC(curve="PR", name="prc") together; `as` is that `name=` in config."""
    plan = resolve(config("task.metrics=[auc,{name:auc,curve:PR,as:prc}]", "objective=val_prc"), CPU_PLAIN)
    assert plan.task.metrics == ["auc", "prc"]
    assert plan.task.arguments == {"metrics": {"prc": {"curve": "PR"}}}
    twice = refused("task.metrics=[auc,{name:auc,curve:PR}]")["task.metrics"]
    assert "['auc'] twice" in twice.expected and "as: auc_2" in twice.fix
    assert "as: m_1x" in refused("task.metrics=[{name:auc,as:'1x'}]")["task.metrics"].fix
    # Not a name the run logs already (a val_ copy overwrote the validation accuracy), and reading as the metric
    # does: the best model kept the highest crossentropy logged as `xent`.
    assert (
        "does not log already" in refused("task.metrics=[accuracy,{name:auc,as:val_accuracy}]")["task.metrics"].expected
    )
    assert refused("task.metrics=[{name:auc,as:loss}]")["task.metrics"].fix == "as: auc_2 in that entry"
    xent = refused("task.metrics=[{name:crossentropy,as:xent}]")["task.metrics"]
    assert "improves going down" in xent.expected and xent.fix == "as: xent_loss in that entry"
    assert resolve(config("task.metrics=[{name:crossentropy,as:xent_loss}]"), CPU_PLAIN).task.metrics == ["xent_loss"]
    assert refused("task.loss={name:crossentropy,as:xent}")["task.loss"].fix == "drop as: xent from task.loss"


def test_each_head_takes_its_own_arguments():
    heads = (
        "+task.heads={churn: {name: classification, loss: {name: crossentropy, ignore_class: 3}, "
        "metrics: [{name: precision, thresholds: 0.3}]}, spend: {name: regression, loss: {name: huber, delta: 0.5}}}"
    )
    plan = resolve(config(heads), CPU_PLAIN)
    assert plan.task.heads["churn"]["arguments"] == {
        "loss": {"ignore_class": 3},
        "metrics": {"precision": {"thresholds": 0.3}},
    }
    assert plan.task.heads["spend"]["loss"] == "huber(delta=0.5)"
    assert plan.task.metrics == ["churn_loss", "churn_precision", "spend_loss", "spend_mae", "spend_rmse"]


def test_precision_recall_auc_and_the_counts_are_metrics_of_a_classification():
    plan = resolve(
        config("task.metrics=[precision,recall,auc,false_negatives]", "task.class_weight={0: 1, 1: 5}"), CPU_PLAIN
    )
    assert plan.task.metrics == ["precision", "recall", "auc", "false_negatives"]
    assert plan.task.class_weight == {0: 1.0, 1: 5.0}


def test_metrics_none_logs_only_the_loss_and_the_objective_follows():
    plan = resolve(config("task=regression", "task.metrics=[none]"), CPU_PLAIN)
    assert plan.task.metrics == [] and plan.task.objective == "val_loss"
    problems = refused("task.metrics=[none,accuracy]")
    assert problems["task.metrics"].fix == "task.metrics=[none]"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("task.loss={gamma:2.0}", "task.loss"),  # no name
        ("task.loss={name:huber,delta:{a:1}}", "task.loss"),  # an argument that is no plain value
        ("task.metrics=[{curve:PR}]", "task.metrics"),
        ("task.outputs=probabilities", "task.outputs"),  # with task=regression below
    ],
)
def test_a_form_that_cannot_work_is_refused_naming_the_key_and_a_fix_before_tensorflow(override, key):
    problem = refused("task=regression", override)[key]
    assert problem.fix.startswith(key + "=")
