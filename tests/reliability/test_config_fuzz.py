"""Random overrides from the real config groups through the real compose + review path.

Every outcome is a Plan or a refusal that names the offending keys; never another exception.
Review is what a launch runs before it writes anything: the resolver's rules, the data and the
schedule (`launcher.launch.review.review`), on a fake 2-core AVX-512 machine.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from fakes import EPYC_AVX512_BF16
from hydra.errors import HydraException
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from omegaconf.errors import OmegaConfBaseException
from support.config import CONF_DIR

from launcher.config.errors import ConfigError
from launcher.config.schema import register_configs, to_config
from launcher.launch.review import review

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
        yield composer(), keys, paths


def composer():
    """Hydra's compose of a list of overrides, each selection of group options composed once.

    Hydra composes in three steps: it parses every override, composes the config the group options select (the
    defaults list, two thirds of its time), then applies the other overrides to it in order
    (`ConfigLoaderImpl._apply_overrides_to_config`). Here the second step is kept per selection and the third runs
    on a copy: the same config or the same error as `compose` (test_composing_once_per_selection_gives_what_compose
    gives), for a third of the CPU on the fuzz's examples. Overrides of Hydra's own node compose in full."""
    import copy

    from hydra import compose
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    repository = GlobalHydra.instance().config_loader().repository  # type: ignore[attr-defined]
    parser = OverridesParser.create()
    selections: dict[tuple[str, ...], object] = {}

    def compose_one(overrides: list[str]):
        parsed = parser.parse_overrides(overrides)  # Hydra's first step: a malformed override fails here
        if any(o.key_or_group.startswith("hydra") for o in parsed):
            return compose(config_name="config", overrides=overrides)
        # Hydra's own split (hydra._internal.defaults_list.Overrides): a group option, or a value to apply.
        picks = [o for o in parsed if repository.group_exists(o.key_or_group) and not isinstance(o.value(), dict)]
        selection = tuple(o.input_line for o in picks)
        if selection not in selections:
            try:
                selections[selection] = compose(config_name="config", overrides=list(selection))
            except (HydraException, OmegaConfBaseException) as err:
                selections[selection] = err
        composed = selections[selection]
        if isinstance(composed, Exception):
            raise composed
        node = copy.deepcopy(composed)
        ConfigLoaderImpl._apply_overrides_to_config([o for o in parsed if o not in picks], node)
        return node

    return compose_one


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


# A refusal in one group can follow from a setting in another (the default config is valid, so every refusal
# follows from something the example set): the batch against the data's size and the replicas, a monitor or an
# objective against the task's metrics, a model against the data's kind, the data against the task's labels.
FOLLOWS = {
    "scaling": {"dataset", "strategy", "train", "optimizer"},
    "checkpoint": {"task", "train"},
    "train": {"task", "checkpoint", "scaling", "optimizer"},
    "objective": {"task", "checkpoint"},
    "model": {"dataset", "task"},
    "dataset": {"task", "model"},
    "task": {"model", "dataset"},
    "loss_scale": {"precision", "strategy", "train"},
    "precision": {"model"},
}
PRESETS = ("experiment", "debug")


def _touched_groups(chosen: list[str]) -> set[str]:
    """The top-level groups an example sets: its overrides' and those a preset (experiment=, debug=) sets."""
    import yaml

    groups = set()
    for override in chosen:
        key, _, value = override.partition("=")
        key = key.lstrip("+~")
        groups.add(key.split(".")[0])
        path = CONF_DIR / key / f"{value}.yaml"
        if key in PRESETS and path.exists():
            data = yaml.safe_load(path.read_text()) or {}
            groups |= {k for k in data if k != "defaults"}
            for entry in data.get("defaults", []):
                if isinstance(entry, dict):
                    groups |= {str(k).removeprefix("override ").lstrip("/").split("/")[0] for k in entry}
    return groups


def _explained(problem_key: str, touched: set[str]) -> bool:
    group = problem_key.split(".")[0]
    return group in touched or bool(FOLLOWS.get(group, set()) & touched)


# Keys every valid Plan decides.
PLAN_KEYS = ("precision.policy", "strategy", "xla", "step", "batch.global", "train.steps_per_epoch")


def _check_one(compose, keys, chosen):
    touched = _override_keys(chosen)
    try:
        node = compose(chosen)
    except (HydraException, OmegaConfBaseException) as err:
        # What the CLI prints (exit 1, with how to list the options): it must name a key we set, in full, or the
        # group option we chose (`model/bogus`).
        message = str(err)
        named = {k for k in touched if k in message}
        named |= {o for o in chosen if "=" in o and o.lstrip("+~").replace("=", "/", 1) in message}
        assert named, (chosen, message)
        return "compose"
    try:
        config = to_config(node)
        checked = review(config, EPYC_AVX512_BF16)
        plan, source, problems = checked.plan, checked.source, checked.problems
        if problems:
            raise ConfigError(problems)
    except ConfigError as err:
        for violation in err.violations:
            assert violation.expected and violation.fix, (chosen, str(err))
            known = violation.key in keys or violation.key.split(".")[0] in keys or violation.key in GROUPS
            assert known or violation.key in touched, (
                chosen,
                violation.key,
            )
        groups = _touched_groups(chosen)
        for violation in err.violations:  # each refusal follows from something this example set
            assert _explained(violation.key, groups), (chosen, violation.key, str(err))
        return "refused"
    decided = plan.values()
    for key in PLAN_KEYS:
        assert key in decided, (chosen, key)
    assert source is not None and source.num_train > 0
    return "plan"


EXAMPLES = int(os.environ.get("LAUNCHER_FUZZ_EXAMPLES", 300))
CHUNKS = 3  # the examples in three seeded chunks, so two test workers share them


@pytest.mark.slow  # 300 composed and reviewed configs, about 45 CPU-s
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_overrides_give_a_plan_or_a_refusal_naming_the_keys(hydra_compose, chunk):
    """Every random example composes, plans or is refused naming its keys; and each chunk's examples reach every
    outcome (examples that were all refusals would prove little). Seeded per chunk: the same examples every run,
    unless LAUNCHER_FUZZ_RANDOM is set."""
    compose, keys, paths = hydra_compose
    outcomes: dict[str, int] = {}
    examples = EXAMPLES // CHUNKS

    @seed(None if os.environ.get("LAUNCHER_FUZZ_RANDOM") else 1000 + chunk)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(data=st.data())
    def one_example(data):
        outcome = _check_one(compose, keys, data.draw(overrides(keys, paths)))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    one_example()
    assert sum(outcomes.values()) >= examples, outcomes
    assert all(outcomes.get(k, 0) >= examples // 12 for k in ("compose", "refused", "plan")), outcomes
    print(f"fuzz outcomes: {outcomes}")


# Each step of Hydra's compose that the shortcut splits: a value over a group option, adding a key (new and taken),
# deleting one, an unknown key, an unknown option, a value of the wrong type, a malformed override, two picks of
# one group, a preset with a value after it, and Hydra's own node.
SPLITS = [
    ["model=cnn", "model.dropout=0.3", "train.epochs=2"],
    ["+model.extra=1", "dataset=synthetic"],
    ["+train.epochs=2"],
    ["~train.max_steps", "precision=bf16"],
    ["model=mlp", "model.bogus=1"],
    ["model=bogus", "train.epochs=abc"],
    ["train.epochs=abc", "dataset=synthetic"],
    ["train.epochs=[1,2", "model=cnn"],
    ["model=cnn", "model=mlp"],
    ["experiment=tokens_lm", "train.epochs=1"],
    ["hydra.job.name=x", "model=cnn"],
]


@pytest.mark.slow  # Hydra's compose of each, twice: about 3 CPU-s
def test_composing_once_per_selection_gives_what_compose_gives(hydra_compose):
    """The fuzz composes each selection of group options once and applies the other overrides as Hydra does: for
    every split of the compose it makes, the same config, or the same error, as Hydra's `compose`."""
    from hydra import compose
    from omegaconf import OmegaConf

    def outcome(compose_one, overrides):
        try:
            return "config", OmegaConf.to_yaml(compose_one(overrides))
        except (HydraException, OmegaConfBaseException) as err:
            return type(err).__name__, str(err)

    shortcut, _, _ = hydra_compose
    outcomes = set()
    for overrides in SPLITS:
        once = outcome(shortcut, overrides)
        assert once == outcome(lambda o: compose(config_name="config", overrides=o), overrides), overrides
        outcomes.add(once[0])
    assert len(outcomes) >= 4, outcomes  # configs and three kinds of error, not one outcome throughout


def test_a_refusal_must_follow_from_what_the_example_set():
    """Negative control for the check above: a refusal of a group nothing touched is not accepted."""
    assert not _explained("model.dropout", _touched_groups(["tracking.uri=x", "train.epochs=2"]))
    assert _explained("scaling.batch_size", _touched_groups(["dataset.limit=3"]))  # the batch against the data
    assert _touched_groups(["experiment=tokens_lm"]) >= {"model", "dataset", "task", "checkpoint", "train"}
    assert _touched_groups(["debug=overfit"]) >= {"dataset", "train", "checkpoint", "tracking"}
