"""The suite's `compose` (conftest: Hydra's group composition once per list of group overrides, then the keys set
with Hydra's own function) gives what Hydra's compose API gives: the same config, the same types, the same
errors. Every in-process test composes through it."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from support.config import HYDRA_COMPOSE_ENV, TINY, compose, hydra_compose

from launcher.config.schema import to_config

SAME = [
    [],
    TINY,
    [*TINY, "precision=mixed", "strategy=mirrored", "xla=true"],
    ["experiment=tokens_lm", "train.epochs=1"],
    ["debug=overfit", "model=cnn", "dataset=digits"],
    ["train.epochs=1", "model=transformer", "model.num_heads=2"],  # a key of a group chosen after it
    ["+tracking.tags.team=vision", "+optimizer.params={beta_1: 0.8}"],  # a dict value sets a key
    ["hydra/launcher=slurm", "train.epochs=3"],
    ["model.hidden_units=[8,8]", "dataset.limit=100", "scaling.batch_size=16", "precision=bf16"],
]


@pytest.fixture(autouse=True)
def two_step_compose(monkeypatch):
    """What is compared is the two-step compose, even in a run that sends every compose to Hydra whole."""
    monkeypatch.delenv(HYDRA_COMPOSE_ENV, raising=False)


REFUSED = [
    ["model.bogus=1"],
    ["model=bogus"],
    ["train.epochs=abc"],
    ["precision=mixed", "scaling.batch_size=[1,2]"],
    ["+train.epochs=3"],
    ["~checkpoint.monitor"],  # a field of a structured config
    ["optimizer.params={beta_1: 0.8}"],  # a new key without its +
]


@pytest.mark.unit  # composes only, though one case names strategy=mirrored
@pytest.mark.parametrize("overrides", SAME, ids=lambda o: " ".join(o) or "defaults")
def test_the_suites_compose_gives_hydras_config(overrides):
    ours, hydras = compose(*overrides), hydra_compose(overrides)
    assert OmegaConf.to_yaml(ours) == OmegaConf.to_yaml(hydras)
    assert OmegaConf.is_struct(ours) and OmegaConf.is_struct(hydras)
    assert to_config(ours) == to_config(hydras)  # the typed config each test reads


@pytest.mark.parametrize("overrides", REFUSED, ids=" ".join)
def test_the_suites_compose_fails_as_hydras_does(overrides):
    with pytest.raises(Exception) as hydras:
        hydra_compose(overrides)
    with pytest.raises(type(hydras.value)) as ours:
        compose(*overrides)
    assert str(ours.value) == str(hydras.value)


def test_a_second_compose_of_the_same_groups_is_not_changed_by_the_first_ones_keys():
    first = compose("precision=mixed", "train.epochs=7")
    first.train.epochs = 9
    assert compose("precision=mixed").train.epochs == hydra_compose(["precision=mixed"]).train.epochs
