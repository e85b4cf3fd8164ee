"""Keys the launcher does not declare are refused, with `+` too, naming the key meant (issue 62, item 6:
`+trian.epochs=3` trained with the default epochs, silently)."""

from __future__ import annotations

import pytest
from support.config import CONF_DIR, compose

from launcher.__main__ import every_key
from launcher.config.errors import ConfigError
from launcher.config.keys import suggestion, typo_hints, unknown_key_problems
from launcher.config.schema import as_dict, to_config


def _refused(*overrides: str) -> dict[str, tuple[str, str]]:
    with pytest.raises(ConfigError) as err:
        to_config(compose(*overrides))
    return {v.key: (v.expected, v.fix) for v in err.value.violations}


def test_keys_added_with_plus_are_refused_at_once_each_with_the_key_meant_and_its_value():
    found = _refused("+trian.epochs=3", "+train.epochz=4", "+batch_size=32", "+lr=0.1", "+model.hiden_units=[8,8]")
    assert found == {
        "trian.epochs": ("a key the launcher declares (did you mean train.epochs?)", "train.epochs=3"),
        "train.epochz": ("a key train declares (did you mean train.epochs?)", "train.epochs=4"),
        "batch_size": ("a key the launcher declares (did you mean scaling.batch_size?)", "scaling.batch_size=32"),
        "lr": ("a key the launcher declares (did you mean optimizer.learning_rate?)", "optimizer.learning_rate=0.1"),
        "model.hiden_units": ("a key model declares (did you mean model.hidden_units?)", "model.hidden_units=[8,8]"),
    }


def test_a_key_like_nothing_declared_is_refused_with_where_to_find_the_keys():
    ((expected, fix),) = _refused("+model.colour=blue").values()
    assert expected == "a key model declares (none is named 'model.colour')"
    assert "--cfg job" in fix


def test_sections_for_the_persons_own_keys_take_any_key():
    cfg = to_config(
        compose(
            "dataset=custom",
            "dataset.loader=contract_parts:whole",
            "+dataset.params.weighted=false",
            "+tracking.tags.team=vision",
            "+optimizer.params={beta_1: 0.8}",
            "task.loss={name:'binary_parts:FocalLoss',gamma:2.0}",
            "task.metrics=[{name:auc,curve:PR},precision]",
            "task.class_weight={0:2.0}",
        )
    )
    assert cfg.dataset.params == {"weighted": False} and cfg.tracking.tags == {"team": "vision"}
    # config.yaml and the MLflow params: the plain data OmegaConf's round trip gives, to the type of each value.
    from omegaconf import OmegaConf

    assert repr(as_dict(cfg)) == repr(OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True))


OWN_GROUPS = [g for g in sorted(CONF_DIR.iterdir()) if g.is_dir() and g.name not in ("hydra", "hparams_search")]


@pytest.mark.parametrize("option", [f"{g.name}={p.stem}" for g in OWN_GROUPS for p in sorted(g.glob("*.yaml"))])
def test_every_shipped_option_declares_every_key_it_sets(option):
    assert unknown_key_problems(compose(option)) == []


def test_hydras_refusal_of_an_unknown_key_gets_the_key_meant_not_its_advice_to_add_it():
    known = every_key()
    assert typo_hints(["trian.epochs=3", "precision=mixed", "hydra.run.dir=x", "experiment=tokens_lm"], known) == [
        "trian.epochs: the launcher has no such key; did you mean train.epochs?  fix: train.epochs=3"
    ]
    assert suggestion("epochs", known) == "train.epochs" and suggestion("sclaing.batch_size", known) == (
        "scaling.batch_size"
    )


def test_an_option_a_group_does_not_have_gets_the_option_meant():
    from launcher.__main__ import group_options

    assert typo_hints(["model=mpl", "precision=bf61", "model=mlp", "strategy=zzz"], every_key(), group_options()) == [
        "model=mpl: model has no option 'mpl'; did you mean model=mlp?",
        "precision=bf61: precision has no option 'bf61'; did you mean precision=bf16?",
    ]


def test_the_cli_names_the_key_meant_when_hydra_refuses_a_typo(cli):
    ran = cli("trian.epochs=3", "explain=true")
    assert ran.returncode == 1
    assert "did you mean train.epochs?  fix: train.epochs=3" in ran.stderr


def test_an_override_hydras_grammar_cannot_read_gets_the_grammars_fix_not_the_options_one():
    """Before: a bracket left open, or a value nested 300 deep (a RecursionError in Hydra), was followed by "give
    that key one of the listed options", which says nothing of what is wrong."""
    from launcher.__main__ import COMPOSE_FIX, GRAMMAR_FIX, compose_fix

    deep = "model.hidden_units=" + "[" * 300 + "]" * 300
    for broken in ("model.hidden_units=[64,32", "name=a b=c"):
        assert compose_fix(["-m", broken, "--cfg", "job"]) == GRAMMAR_FIX, broken
    assert compose_fix([deep]).startswith("fix: a value nested 300 deep is more than a config holds")
    assert compose_fix(["--cfg", "job", "precision=mixed"]) == COMPOSE_FIX  # parses: the general fix
    assert "did you mean train.epochs" in compose_fix(["trian.epochs=3"])
