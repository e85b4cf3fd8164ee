"""Installed plugins by short name (`launcher.config.imports`: PLUGIN_GROUPS, plugins, component_path): a loss, a
metric or a callback an installed distribution declares resolves as its import path does, a built-in name wins
over a plugin's, and an unknown name is refused with the key, the value, the choices (installed plugins among
them) and a fix. Entry points are faked in this process (`support.plugins`); the e2e test installs a real one."""

from __future__ import annotations

import pytest
from fakes import CPU_PLAIN
from support import plugins
from support.config import config

from launcher.config.errors import ConfigError
from launcher.config.imports import PLUGIN_GROUPS, component_path, plugin_choices
from launcher.config.tasks import epoch_metrics, known_epoch_metrics
from launcher.plan.resolve import resolve, resolve_all

INSTALLED = {
    "launcher.losses": {"doubled": "user_parts:DoubledSquaredError", "mse": "user_parts:DoubledSquaredError"},
    "launcher.metrics": {"my_mape": "keras.metrics:MeanAbsolutePercentageError"},
    "launcher.callbacks": {"recorder": "user_parts:RecordingCallback"},
}


@pytest.fixture
def installed(monkeypatch):
    plugins.install(monkeypatch, INSTALLED)


def refusals(*overrides) -> dict[str, object]:
    _, found = resolve_all(config(*overrides), CPU_PLAIN)
    return {f"{v.key}={v.value}": v for v in found}


def test_every_kind_a_person_provides_has_its_entry_point_group():
    assert PLUGIN_GROUPS == {
        "model": "launcher.models",
        "dataset": "launcher.datasets",
        "loss": "launcher.losses",
        "metric": "launcher.metrics",
        "callback": "launcher.callbacks",
        "export": "launcher.exports",
    }


def test_a_plugin_name_stands_for_its_import_path_and_an_import_path_for_itself(installed):
    assert component_path("loss", "doubled") == "user_parts:DoubledSquaredError"
    assert component_path("loss", "my_pkg.losses:focal") == "my_pkg.losses:focal"
    assert component_path("loss", "focal") is None  # neither: the caller names the choices
    assert component_path("metric", "doubled") is None  # each kind reads its own group
    assert plugin_choices("callback") == "an installed plugin (launcher.callbacks: recorder)"


def test_without_plugins_a_refusal_says_none_are_installed(monkeypatch):
    plugins.install(monkeypatch, {})
    assert plugin_choices("loss") == "an installed plugin's name (entry point group launcher.losses; none installed)"


def test_a_plugin_loss_and_metric_resolve_by_name_and_the_plan_names_the_plugin(installed):
    chosen = config("task=regression", "precision=mixed", "task.loss=doubled", "task.metrics=[my_mape,mae]")
    plan = resolve(chosen, CPU_PLAIN)
    assert plan.task.loss == "doubled"
    assert "installed plugin's (user_parts:DoubledSquaredError)" in plan.task.reason("loss")
    assert "never computes in float16" in plan.task.reason("loss")
    assert list(plan.task.metrics) == ["my_mape", "mae"]


def test_a_plugin_metrics_logged_name_is_known_at_build_so_the_monitor_waits_for_it(installed):
    monitor = "checkpoint.monitor=val_mean_absolute_percentage_error"
    assert not refusals("task=regression", "task.metrics=[my_mape]", monitor)
    assert known_epoch_metrics("regression", ["my_mape"]) is None
    assert "val_mean_absolute_percentage_error" in epoch_metrics(["mean_absolute_percentage_error"])


def test_an_unknown_loss_or_metric_is_refused_naming_the_installed_plugins(installed):
    found = refusals("task.loss=dubled", "task.metrics=[my_mapee]")
    loss = found["task.loss=dubled"]
    assert "your own as module.path:function, or an installed plugin (launcher.losses: doubled, mse)" in loss.expected
    assert loss.fix == "task.loss=crossentropy"
    metric = found["task.metrics=my_mapee"]
    assert "did you mean my_mape?" in metric.expected
    other = refusals("task.metrics=[xyzzy]")["task.metrics=xyzzy"]
    assert "or an installed plugin (launcher.metrics: my_mape)" in other.expected


def test_a_built_in_name_wins_over_a_plugin_of_the_same_name(installed):
    from launcher.config.schema import TaskConfig, TaskName
    from launcher.train.tasks import make_task

    task = make_task(TaskConfig(name=TaskName.regression, loss="mse", metrics=["mae"]))
    assert type(task.loss).__name__ == "MeanSquaredError"  # not the plugin called mse
    assert refusals("task=classification", "task.loss=mse")  # mse is regression's: refused, not the plugin


def test_the_build_imports_a_plugin_loss_and_metric_by_name(installed):
    import keras
    import numpy as np
    import user_parts

    from launcher.config.schema import TaskConfig, TaskName
    from launcher.train.tasks import make_task

    task = make_task(TaskConfig(name=TaskName.regression, loss="doubled", metrics=["my_mape"]))
    assert isinstance(task.loss, user_parts.DoubledSquaredError) and task.loss.reduction is None
    assert [type(m) for m in task.train_metrics] == [keras.metrics.MeanAbsolutePercentageError]
    y, outputs = np.array([1.0, 2.0], "float32"), np.array([[2.0], [2.0]], "float32")
    assert np.allclose(task.per_example_loss(y, outputs), [2.0, 0.0])


def test_a_plugin_callback_is_made_by_name_and_an_unknown_one_is_refused_with_the_choices(installed):
    import user_parts

    from launcher.train.callbacks import make_callbacks

    made = make_callbacks(config("train.callbacks=[recorder,user_parts:RecordingCallback]").train)
    assert [type(c) for c in made] == [user_parts.RecordingCallback] * 2
    with pytest.raises(ConfigError) as err:
        make_callbacks(config("train.callbacks=[recordr]").train)
    (violation,) = err.value.violations
    assert (violation.key, violation.value) == ("train.callbacks", "recordr")
    assert "module.path:Name" in violation.expected and "launcher.callbacks: recorder" in violation.expected
    assert violation.fix == "train.callbacks=[recorder]"


def test_an_unknown_callback_is_refused_with_the_configs_other_problems_before_anything_is_imported(installed):
    found = refusals("train.callbacks=[recordr,user_parts:RecordingCallback,no_such]", "task.loss=dubled")
    assert set(found) == {"train.callbacks=recordr", "train.callbacks=no_such", "task.loss=dubled"}
    assert found["train.callbacks=recordr"].fix == "train.callbacks=[recorder]"
    assert found["train.callbacks=no_such"].fix == "train.callbacks=[my_package.callbacks:MyCallback]"


def test_help_lists_the_installed_losses_metrics_and_callbacks_by_the_key_that_takes_them(installed):
    from support.config import CONF_DIR

    from launcher.config.help import group_listing

    listed = group_listing(CONF_DIR).splitlines()
    assert "  task.loss (installed plugins): doubled, mse" in listed
    assert "  task.metrics (installed plugins): my_mape" in listed
    assert "  train.callbacks (installed plugins): recorder" in listed


def test_help_lists_no_plugin_keys_when_none_are_installed(monkeypatch):
    from support.config import CONF_DIR

    from launcher.config.help import group_listing

    plugins.install(monkeypatch, {})
    assert "installed plugins" not in group_listing(CONF_DIR)


def test_a_heads_loss_and_metrics_take_plugin_names_too(installed):
    heads = "+task.heads={spend: {name: regression, loss: doubled, metrics: [my_mape]}, churn: {name: classification}}"
    plan = resolve(config(heads), CPU_PLAIN)
    assert plan.task.heads["spend"]["loss"] == "doubled" and plan.task.heads["spend"]["metrics"] == ["my_mape"]
    assert "my_mape" in plan.task.metrics  # logged under the name it is built with: known once it is built


def test_once_built_a_monitor_is_checked_against_the_plugin_metrics_own_name(installed):
    from launcher.config.tasks import monitor_problems

    built = epoch_metrics(["mean_absolute_percentage_error"])  # what the build logs for my_mape
    chosen = config("task=regression", "task.metrics=[my_mape]", "checkpoint.monitor=val_my_mape")
    (problem,) = monitor_problems(chosen, "regression", built)
    assert (problem.key, problem.value) == ("checkpoint.monitor", "val_my_mape")
    assert "val_mean_absolute_percentage_error" in problem.expected
