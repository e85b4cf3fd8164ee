"""Metric names are checked with every other setting, before TensorFlow loads (issue 62, item 9:
`precision=mixed loss_scale=none task.metrics=[acuracy]` reported the loss scale alone, the typo a launch later;
a monitor's refusal offered `val_acuracy`)."""

from __future__ import annotations

import pytest
from fakes import CPU_PLAIN
from support.config import config

from launcher.config.errors import ConfigError
from launcher.config.tasks import KERAS_METRICS
from launcher.plan.resolve import resolve


def test_the_keras_metric_names_are_the_ones_keras_metrics_get_takes():
    from keras.src.metrics import ALL_OBJECTS_DICT

    assert set(KERAS_METRICS) == {name for name in ALL_OBJECTS_DICT if name == name.lower()}


def _refused(*overrides: str) -> dict[str, tuple[str, str]]:
    with pytest.raises(ConfigError) as err:
        resolve(config(*overrides), CPU_PLAIN)
    return {f"{v.key}={v.value}": (v.expected, v.fix) for v in err.value.violations}


def test_a_misspelt_metric_is_refused_in_the_first_pass_with_every_other_problem():
    found = _refused("precision=mixed", "loss_scale=none", "task.metrics=[acuracy]")
    assert set(found) == {"loss_scale=none", "task.metrics=acuracy"}
    assert found["task.metrics=acuracy"] == (
        "a metric name the launcher or keras.metrics knows (did you mean accuracy?)",
        "task.metrics=[accuracy]",
    )


def test_no_suggestion_names_a_metric_that_is_itself_refused():
    found = _refused("checkpoint.monitor=val_acc", "task.metrics=[acuracy,xyzzy]")
    expected, fix = found["checkpoint.monitor=val_acc"]
    assert "acuracy" not in expected + fix and "xyzzy" not in expected + fix
    assert "'val_accuracy'" in expected  # the metric the fix for task.metrics names
    assert found["task.metrics=xyzzy"][1] == "task.metrics=[accuracy]"


def test_keras_names_class_names_and_import_paths_pass_the_first_pass():
    plan = resolve(config("task.metrics=[accuracy,AUC,mean_absolute_percentage_error]"), CPU_PLAIN)
    assert list(plan.task.metrics) == ["accuracy", "AUC", "mean_absolute_percentage_error"]


@pytest.mark.parametrize(
    ("overrides", "best_by", "mode", "reason"),
    [
        ((), "val_accuracy", "max", "checkpoint.monitor=auto: the objective"),  # the default job
        (("task=regression", "model=mlp"), "val_loss", "min", "checkpoint.monitor=auto: the objective"),
        (("objective=val_loss",), "val_loss", "min", "checkpoint.monitor=auto: the objective"),
        (("checkpoint.monitor=val_loss", "checkpoint.mode=max"), "val_loss", "max", "requested"),
    ],
)
def test_the_default_job_keeps_the_best_model_by_its_objective_in_the_direction_the_metric_improves(
    overrides, best_by, mode, reason
):
    plan = resolve(config(*overrides), CPU_PLAIN)
    assert (plan.task.best_by, plan.task.best_mode) == (best_by, mode)
    assert plan.task.reason("best_by").startswith(reason)
    assert plan.values()["checkpoint.monitor"] == best_by  # plan.yaml and the plan.* tags say it


def test_no_best_model_when_the_monitor_is_off():
    plan = resolve(config("checkpoint.monitor=''"), CPU_PLAIN)
    assert plan.task.best_by is None and "checkpoint.monitor" not in plan.values()
