"""Random overrides from the real config groups through the real compose + review path.

Every outcome is a Plan or a refusal that names the offending keys; never another exception.
Review is what a launch runs before it writes anything: the resolver's rules, the data and the
schedule (`launcher.run.runner.review`), on a fake 2-core AVX-512 machine.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from conftest import CONF_DIR
from fakes import EPYC_AVX512_BF16
from hydra.errors import HydraException
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf.errors import OmegaConfBaseException

from launcher.config.errors import ConfigError
from launcher.config.schema import register_configs, to_config
from launcher.run.runner import review

GROUPS = {
    group.name: sorted(p.stem for p in group.glob("*.yaml"))
    for group in CONF_DIR.iterdir()
    if group.is_dir() and group.name not in ("hydra", "hparams_search")
}

INTS = [-1, 0, 1, 2, 3, 8, 33, 512]
FLOATS = [-0.5, 0.0, 1e-4, 0.1, 0.5, 0.999, 1.0, 2.0, math.nan, math.inf]
STRINGS = ["abc", "''", "true", "null", "[1,2]", "val_loss", "val_accuracy", "accuracy", "auto", "never"]
LISTS = ["[32]", "[]", "[0]", "[8,8]", "[4,4,3]", "[-1]", "abc"]
UNKNOWN = ["model.bogus=1", "+model.bogus=1", "bogus=1", "train.bogus=true", "+train.profile.bogus=2"]


def _leaves(node, prefix=""):
    from omegaconf import OmegaConf

    for key, value in node.items():
        if OmegaConf.is_dict(value):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.fixture(scope="module")
def hydra_compose(tmp_path_factory):
    """One Hydra context for every example; data files users point at, valid and broken."""
    from hydra import compose, initialize_config_dir

    register_configs()
    folder = tmp_path_factory.mktemp("fuzzdata")
    rng = np.random.default_rng(0)
    np.savez(folder / "good.npz", x=rng.normal(size=(60, 5)).astype("float32"), y=np.arange(60) % 3)
    np.savez(folder / "nan.npz", x=np.full((60, 5), np.nan), y=np.arange(60) % 3)
    (folder / "broken.npz").write_bytes(b"PK\x03\x04 no")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        # key -> (its value, the overrides that bring it in: a key of one model or dataset option
        # is fuzzed together with that option, or it would only ever test "unknown key").
        keys = {key: (value, []) for key, value in _leaves(compose(config_name="config", overrides=[]))}
        for group, options in (("model", GROUPS["model"]), ("dataset", GROUPS["dataset"])):
            for option in options:
                needs = {
                    "npz": f"dataset.path={folder}",
                    "image_folder": f"dataset.path={folder}",
                    "tfrecord": f"dataset.train={folder}/train-*.tfrecord",
                }
                overrides = [f"{group}={option}"] + ([needs[option]] if option in needs else [])
                for key, value in _leaves(compose(config_name="config", overrides=overrides)):
                    keys.setdefault(key, (value, [f"{group}={option}"]))
        paths = [str(folder / name) for name in ("good.npz", "nan.npz", "broken.npz", "missing.npz")] + [str(folder)]
        yield (lambda overrides: compose(config_name="config", overrides=overrides)), keys, paths


def _values_for(key: str, example, paths) -> tuple[list[str], list[str]]:
    """(values of the key's type, valid or not; values of another type)."""
    from enum import Enum

    if key.endswith("path"):
        return paths, ["[1,2]"]
    if isinstance(example, Enum):
        return [m.name for m in type(example)] + ["bogus"], ["3"]
    if isinstance(example, bool):
        return ["true", "false"], ["maybe", "3"]
    if isinstance(example, int):
        return [str(v) for v in INTS], ["abc", "1.5"]
    if isinstance(example, float):
        return [str(v) for v in FLOATS], ["abc"]
    if example is None or isinstance(example, str):
        return STRINGS, ["[1,2]"]
    return LISTS[:-1], LISTS[-1:]


@st.composite
def overrides(draw, keys, paths):
    chosen = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["group"] * 4 + ["key"] * 5 + ["unknown"]))
        if kind == "group":
            group = draw(st.sampled_from(sorted(GROUPS)))
            option = "bogus" if draw(st.integers(0, 7)) == 0 else draw(st.sampled_from(GROUPS[group]))
            chosen.append(f"{group}={option}")
        elif kind == "key":
            key = draw(st.sampled_from(sorted(keys)))
            if key in ("tracking.uri", "name") or key.endswith(".name"):
                continue
            example, needs = keys[key]
            typed, other = _values_for(key, example, paths)
            values = other if draw(st.integers(0, 7)) == 0 else typed
            chosen += [*needs, f"{key}={draw(st.sampled_from(values))}"]
        else:
            chosen.append(draw(st.sampled_from(UNKNOWN)))
    return chosen


def _override_keys(chosen: list[str]) -> set[str]:
    return {o.split("=", 1)[0].lstrip("+~") for o in chosen}


def _related(problem_key: str, override_key: str) -> bool:
    """A refusal of `model.dropout` names `model=cnn` and vice versa; the same group counts (and a
    refusal that says which of our overrides it conflicts with, checked by the caller)."""
    return problem_key.split(".")[0] == override_key.split(".")[0]


def _data_or_batch(problem_key: str) -> bool:
    """Problems found in the data or the schedule follow from the dataset and the batch together."""
    return problem_key.split(".")[0] in ("dataset", "scaling", "train", "strategy")


# Keys every valid Plan decides.
PLAN_KEYS = ("precision.policy", "strategy", "xla", "step", "batch.global", "train.steps_per_epoch")


def _check_one(compose, keys, chosen):
    touched = _override_keys(chosen)
    try:
        node = compose(chosen)
    except (HydraException, OmegaConfBaseException) as err:
        # What the CLI prints (exit 1, with how to list the options): it must name a key we set.
        message = str(err)
        assert any(k.split(".")[-1] in message or k.split(".")[0] in message for k in touched), (chosen, message)
        return "compose"
    try:
        config = to_config(node)
        plan, source, problems = review(config, EPYC_AVX512_BF16)
        if problems:
            raise ConfigError(problems)
    except ConfigError as err:
        for violation in err.violations:
            assert violation.expected and violation.fix, (chosen, str(err))
            assert violation.key in keys or violation.key.split(".")[0] in keys or violation.key in GROUPS, (
                chosen,
                violation.key,
            )
        named = {v.key for v in err.violations}
        assert (
            any(_related(p, o) for p in named for o in touched)
            or any(o in str(err) for o in touched)
            or all(_data_or_batch(p) for p in named)
        ), (chosen, str(err))
        return "refused"
    decided = plan.values()
    for key in PLAN_KEYS:
        assert key in decided, (chosen, key)
    assert source is not None and source.num_train > 0
    return "plan"


EXAMPLES = int(os.environ.get("LAUNCHER_FUZZ_EXAMPLES", 300))


def test_random_overrides_give_a_plan_or_a_refusal_naming_the_keys(hydra_compose):
    """Every random example composes, plans or is refused naming its keys; and the examples reach every outcome
    (examples that were all refusals would prove little)."""
    compose, keys, paths = hydra_compose
    outcomes: dict[str, int] = {}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=not os.environ.get("LAUNCHER_FUZZ_RANDOM"),
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(data=st.data())
    def one_example(data):
        outcome = _check_one(compose, keys, data.draw(overrides(keys, paths)))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    one_example()
    assert sum(outcomes.values()) >= EXAMPLES, outcomes
    assert all(outcomes.get(k, 0) >= 25 for k in ("compose", "refused", "plan")), outcomes
    print(f"fuzz outcomes: {outcomes}")
