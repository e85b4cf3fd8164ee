"""A task per model output (`task.heads`) and class weights: every resolver rule, against fake environments."""

from __future__ import annotations

import pytest
from fakes import CPU_PLAIN, ONE_A100, TWO_A100
from support.config import compose, config

from launcher.config.errors import ConfigError
from launcher.plan.resolve import resolve

TWO_HEADS = "+task.heads={kind: {name: classification, metrics: [accuracy], class_weight: balanced}, size: {name: regression, loss_weight: 0.5, metrics: [mae]}}"  # noqa: E501


def plan_for(env, *overrides):
    return resolve(config(*overrides), env)


def refusals(*overrides, env=CPU_PLAIN) -> dict[str, ConfigError]:
    with pytest.raises(ConfigError) as err:
        plan_for(env, *overrides)
    return {v.key: v for v in err.value.violations}


def test_each_head_gets_its_task_loss_weight_metrics_and_class_weight_with_reasons():
    plan = plan_for(CPU_PLAIN, TWO_HEADS)
    heads = plan.task.heads
    assert list(heads) == ["kind", "size"]
    assert heads["kind"] == {
        "task": "classification",
        "loss": "crossentropy",
        "loss_weight": 1.0,
        "metrics": ["accuracy"],
        "class_weight": "balanced",
    }
    assert heads["size"] == {
        "task": "regression",
        "loss": "mse",
        "loss_weight": 0.5,
        "metrics": ["mae"],
        "class_weight": "none",
    }
    why = plan.task.reason("heads")
    assert "kind: classification" in why and "size: regression" in why and "balanced" in why
    assert plan.task.name == "heads"
    assert plan.task.loss == "1*kind:crossentropy + 0.5*size:mse"
    # Logged as Keras names a model output's metrics.
    assert plan.task.metrics == ["kind_loss", "kind_accuracy", "size_loss", "size_mae"]
    assert plan.task.objective == "val_loss"


def test_head_defaults_come_from_its_task():
    plan = plan_for(CPU_PLAIN, "+task.heads={a: {name: multilabel}, b: {name: regression, loss: huber}}")
    assert plan.task.heads["a"]["metrics"] == ["auc", "precision", "recall"]
    assert plan.task.heads["a"]["loss"] == "binary_crossentropy"
    assert plan.task.heads["b"]["loss"] == "huber" and plan.task.heads["b"]["metrics"] == ["mae", "rmse"]


def test_a_mixed_policy_says_every_head_loss_is_float32():
    plan = plan_for(ONE_A100, TWO_HEADS, "precision=mixed")
    assert plan.task.reason("heads").count("computed in float32") == 2


def test_without_heads_the_plan_is_as_before():
    plan = plan_for(CPU_PLAIN)
    decided = plan.decisions()
    assert "task.heads" not in decided and "task.class_weight" not in decided
    assert plan.task.name == "classification" and plan.task.metrics == ["accuracy"]


def test_every_head_refusal_is_listed_at_once_with_key_value_choices_and_fix():
    found = refusals(
        "+task.heads={kind: {name: classification, metrics: [mae], loss_weight: -1}, "
        "size: {name: regression, class_weight: balanced, loss: crossentropy}, "
        "tags: {name: multilabel, class_weight: {0: 2.0}}}"
    )
    assert set(found) == {
        "task.heads.kind.metrics",
        "task.heads.kind.loss_weight",
        "task.heads.size.class_weight",
        "task.heads.size.loss",
        "task.heads.tags.class_weight",
    }
    weight = found["task.heads.kind.loss_weight"]
    assert weight.value == -1 and ">= 0" in weight.expected and weight.fix == "task.heads.kind.loss_weight=1.0"
    regression = found["task.heads.size.class_weight"]
    assert regression.value == "balanced" and "classification" in regression.expected
    assert "sample_weight" in regression.fix
    assert "mae" in str(found["task.heads.kind.metrics"].value)
    assert "accuracy" in found["task.heads.kind.metrics"].expected
    assert "mse" in found["task.heads.size.loss"].expected


def test_an_unknown_head_task_name_fails_when_the_config_is_composed_naming_the_key_and_choices():
    with pytest.raises(Exception, match=r"regresion") as err:
        compose("+task.heads={a: {name: regresion}}")
    cause = str(err.value.__cause__)
    assert "task.heads.a.name" in cause and "regression" in cause and "classification" in cause


@pytest.mark.parametrize(
    "value", ["'{0: -1.0}'", "'{x: 1.0}'", "often", "'{0: .nan}'"], ids=["negative", "not-an-id", "word", "nan"]
)
def test_a_bad_class_weight_is_refused_with_the_choices(value):
    found = refusals(f"+task.heads={{a: {{name: classification, class_weight: {value.strip(chr(39))}}}}}")
    assert set(found) == {"task.heads.a.class_weight"}
    assert "balanced" in found["task.heads.a.class_weight"].expected


def test_one_head_class_weight_balanced_or_a_mapping():
    plan = plan_for(CPU_PLAIN, "task.class_weight=balanced")
    assert plan.task.class_weight == "balanced" and "n / (classes" in plan.task.reason("class_weight")
    plan = plan_for(CPU_PLAIN, "task.class_weight={0: 1.0, 3: 2.5}")
    assert plan.task.class_weight == {0: 1.0, 3: 2.5}


def test_one_head_class_weight_on_regression_is_refused():
    found = refusals("task=regression", "task.class_weight=balanced", "dataset=synthetic")
    assert set(found) == {"task.class_weight"}
    assert found["task.class_weight"].fix.startswith("drop task.class_weight")


def test_one_head_keys_set_beside_heads_are_refused_not_ignored():
    found = refusals("+task.heads={a: {name: regression}}", "task.metrics=[accuracy]", "task.class_weight=balanced")
    assert set(found) == {"task.metrics", "task.class_weight"}
    assert "task.heads.a.metrics" in found["task.metrics"].fix


def test_monitors_and_the_objective_may_name_any_head_metric():
    plan = plan_for(
        CPU_PLAIN,
        TWO_HEADS,
        "checkpoint.monitor=val_kind_accuracy",
        "checkpoint.mode=max",
        "objective=val_size_mae",
        "train.early_stopping.enabled=true",
        "train.early_stopping.monitor=val_size_loss",
    )
    assert plan.task.objective == "val_size_mae"


def test_a_monitor_no_head_logs_is_refused_naming_the_head_metrics():
    found = refusals(TWO_HEADS, "checkpoint.monitor=val_accuracy")
    assert "val_kind_accuracy" in found["checkpoint.monitor"].expected


def test_explain_shows_the_heads_losses_weights_and_class_weights():
    rendered = plan_for(CPU_PLAIN, TWO_HEADS).render(whole=True)  # as explain shows it; a launch cuts the line
    line = next(line for line in rendered.splitlines() if line.strip().startswith("task.heads"))
    for shown in ("kind", "size", "crossentropy", "mse", "0.5", "balanced", "mae"):
        assert shown in line


def test_a_users_own_task_file_on_the_search_path_is_enough(tmp_path):
    conf = tmp_path / "conf" / "task"
    conf.mkdir(parents=True)
    (conf / "mine.yaml").write_text(
        "defaults:\n  - /schema/task@_here_\n\nheads:\n"
        "  kind: {name: classification, metrics: [accuracy], class_weight: balanced}\n"
        "  size: {name: regression, loss_weight: 0.5, metrics: [mae]}\n"
    )
    plan = plan_for(CPU_PLAIN, f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "task=mine")
    assert plan.task.heads["size"]["loss_weight"] == 0.5 and plan.task.heads["kind"]["class_weight"] == "balanced"


# ------------------------------------------------------------------------------------------------ every cell

PRECISIONS = ("fp32", "mixed", "bf16")
STRATEGIES = ("default", "one_device", "mirrored", "multi_worker")
XLA = ("true", "false", "auto")
CELLS = [(p, s, x) for p in PRECISIONS for s in STRATEGIES for x in XLA]
WORKERS = ("strategy.workers=[10.0.0.1:2000,10.0.0.2:2000]", "strategy.task_index=0")
# The task's keys a head changes; every other decision (precision, step, loss scaling, batch...) is the same.
TASK_KEYS = {"task", "task.head", "task.heads", "task.loss", "task.metrics", "objective"}


def outcome(env, *overrides):
    """The Plan, or the keys the refusal names."""
    try:
        return resolve(config(*overrides), env)
    except ConfigError as err:
        return sorted(v.key for v in err.violations)


@pytest.mark.parametrize(("precision", "strategy", "xla"), CELLS, ids=["-".join(c) for c in CELLS])
def test_every_cell_resolves_with_the_heads_or_is_refused_as_without_them(precision, strategy, xla):
    """On a CPU and on two A100s, with the launcher's loss-scale optimizer and with Keras's stock one (refused in
    some cells): the heads change the task's decisions only, and a cell refused without heads is refused with them
    for the same keys."""
    cell = [f"precision={precision}", f"strategy={strategy}", f"xla={xla}", *(WORKERS * (strategy == "multi_worker"))]
    refused = 0
    for env in (CPU_PLAIN, TWO_A100):
        for implementation in ("auto", "stock"):
            overrides = [*cell, f"loss_scale.implementation={implementation}"]
            alone, headed = outcome(env, *overrides), outcome(env, *overrides, TWO_HEADS)
            if isinstance(alone, list):
                assert headed == alone, (env, implementation)
                refused += 1
                continue
            assert not isinstance(headed, list), (env, implementation, headed)
            assert list(headed.task.heads) == ["kind", "size"]
            assert headed.task.heads["size"]["loss_weight"] == 0.5
            assert headed.task.heads["kind"]["class_weight"] == "balanced"
            mixed = precision != "fp32"
            assert headed.task.reason("heads").count("computed in float32") == 2 * mixed, headed.task.reason("heads")
            before, after = alone.values(), headed.values()
            changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
            assert changed <= TASK_KEYS, changed - TASK_KEYS
    if (precision, xla) == ("mixed", "true") and strategy in ("mirrored", "multi_worker"):
        assert refused >= 1  # the stock loss-scale optimizer crashes under XLA with replicas: refused either way
