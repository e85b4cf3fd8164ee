"""The real config as the CLI composes it, shrunk: `compose` / `config` and the overrides that keep a run tiny."""

from __future__ import annotations

import functools
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
CONF_DIR = ROOT / "conf"

# Overrides that keep a real run small and fast.
TINY = [
    "model.hidden_units=[32]",
    "train.epochs=2",
    "scaling.batch_size=32",
    "train.steps_per_execution=4",
]


_COMPOSED: dict[tuple[str, ...], object] = {}  # by the group overrides: Hydra's costly step, once per process
HYDRA_COMPOSE_ENV = "LAUNCHER_TEST_HYDRA_COMPOSE"  # =1: every `compose` is Hydra's whole compose


@functools.cache
def _schemas_registered() -> None:
    """The launcher's schemas in Hydra's ConfigStore, once per process (storing them each time cost a quarter of a
    compose)."""
    from launcher.config.schema import register_configs

    register_configs()


def hydra_compose(overrides) -> object:
    """Hydra's compose API on conf/config.yaml, as the CLI composes (its `hydra` node left out)."""
    from hydra import compose as compose_api
    from hydra import initialize_config_dir

    _schemas_registered()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose_api(config_name="config", overrides=list(overrides))


@functools.cache
def _groups_repository():
    """Hydra's config repository of conf/ (its search path), made once per process: which keys are config groups."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    _schemas_registered()  # before the repository: Hydra 1.3 keeps a copy of the ConfigStore in it
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return GlobalHydra.instance().config_loader()._parse_overrides_and_create_caching_repo("config", [])[1]


def _split_as_hydra_does(overrides) -> tuple[tuple[str, ...], list] | None:
    """(the overrides that choose group options, the parsed overrides that set keys), split by Hydra's own parser
    and rule (a dict value or a key that is no config group sets a key; `defaults_list.Overrides`); None for a
    list Hydra must compose whole (a sweep, a key of the `hydra` node such as its search path)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    repository = _groups_repository()
    groups, keys = [], []
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        if override.is_sweep_override():
            return None
        if isinstance(override.value(), dict) or not repository.group_exists(override.key_or_group):
            if override.key_or_group.split(".")[0] == "hydra":
                return None
            keys.append(override)
        else:
            groups.append(override.input_line)
    return tuple(groups), keys


def compose(*overrides: str):
    """Compose conf/config.yaml with overrides as the CLI does. Hydra composes in two steps: the group options
    the overrides choose (its defaults list, ~0.3 CPU-s), then, in struct mode, the keys the others set
    (`ConfigLoaderImpl._apply_overrides_to_config`). The first step runs once per test process for each list of
    group overrides; each call then sets its keys on a copy with Hydra's own function (tests change what they
    get). `tests/suite/test_compose.py` checks this gives Hydra's compose, config and error alike."""
    import copy

    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    split = None if os.environ.get(HYDRA_COMPOSE_ENV) == "1" else _split_as_hydra_does(overrides)
    if split is None:
        return hydra_compose(overrides)
    groups, keys = split
    if groups not in _COMPOSED:
        _COMPOSED[groups] = hydra_compose(groups)
    composed = copy.deepcopy(_COMPOSED[groups])
    ConfigLoaderImpl._apply_overrides_to_config(keys, composed)
    return composed


def config(*overrides: str):
    from omegaconf import OmegaConf

    return OmegaConf.to_object(compose(*overrides))
