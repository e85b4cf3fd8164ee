"""A search of a model with several heads (`launcher.sweep.search`): its objectives may name any metric a heads run
logs (val_<head>_<metric>, val_<head>_loss, the total val_loss), and one it never logs is refused naming them."""

from __future__ import annotations

import pytest

HEADS = (
    "+task.heads={kind: {name: classification, metrics: [accuracy]}, "
    "size: {name: regression, loss_weight: 0.5, metrics: [mae]}}"
)


def _search(tmp_path, objectives):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from support.config import CONF_DIR

    from launcher.config.schema import register_configs
    from launcher.sweep.search import Search

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        config = hydra_compose(
            config_name="config", overrides=[f"hydra.sweep.dir={tmp_path}", HEADS], return_hydra_config=True
        )
        loader = GlobalHydra.instance().config_loader()
    search = Search(objectives=objectives, params={"optimizer.learning_rate": {"low": 1e-4, "high": 0.1}})
    search.node = config
    search.hydra_context = type("Context", (), {"config_loader": loader})()
    return search


def _objective_problems(search) -> list:
    _, _, problems = search.plan([])
    return [p for p in problems if p.key == "hydra.sweeper.objectives"]


@pytest.mark.parametrize(
    "objectives",
    [["val_kind_accuracy"], ["val_size_mae", "val_kind_loss"], ["val_size_loss"], ["val_loss"], None],
    ids=["head-metric", "two-heads", "head-loss", "total", "auto"],
)
def test_a_heads_search_may_aim_at_any_metric_a_head_logs(tmp_path, objectives):
    assert _objective_problems(_search(tmp_path, objectives)) == []


def test_an_objective_no_head_logs_is_refused_naming_the_heads_metrics(tmp_path):
    problems = _objective_problems(_search(tmp_path, ["val_accuracy"]))
    assert len(problems) == 1
    said = str(problems[0].expected)
    assert "val_kind_accuracy" in said and "val_size_mae" in said and "val_size_loss" in said
