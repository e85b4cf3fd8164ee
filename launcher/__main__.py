"""`python -m launcher [overrides]`: compose with Hydra, then one launch or one sweep job."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import hydra
from omegaconf import DictConfig

from hydra_plugins.launcher_search.sweeper import SearchSweeper
from launcher import background
from launcher.config import run_mode, yaml_files
from launcher.config.help import register_help
from launcher.config.imports import config_packages
from launcher.config.keys import schema_keys, typo_hints
from launcher.config.schema import DATASET_SCHEMAS, MODEL_SCHEMAS, Config, register_configs
from launcher.doctor.doctor_mode import launch as launch_doctor
from launcher.inference.evaluate import evaluate
from launcher.launch import run_dirs
from launcher.launch.train_mode import launch as launch_training
from launcher.outcome import EXIT_FAILED
from launcher.supervise.local_workers import local_worker_count, local_workers_attempt
from launcher.supervise.restarts import (
    REASON_ENV,
    RESTART_ENV,
    Attempt,
    child_attempts,
    supervise,
    supervised,
)
from launcher.sweep import callback as sweep_callback

CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")
COMPOSE_FIX = (
    "fix: give that key one of the listed options or a value of the expected type. "
    "`python -m launcher --help` lists "
    "every config group and its options; `python -m launcher --cfg job` prints every key with "
    "its current value."
)

GRAMMAR_FIX = (
    "fix: write each override as Hydra's grammar reads it, quoted for your shell: 'model.hidden_units=[64,32]', "
    "'name=\"my run\"' (https://hydra.cc/docs/advanced/override_grammar/basic/)."
)
# Hydra's flags that take the next argument (it is no override).
DEEPEST = 50  # brackets in one override: OmegaConf's nodes recurse per level
VALUED_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd"}

register_configs()
run_dirs.register()
register_help(CONF_DIR)
_task_started = False


@dataclass(frozen=True)
class Invocation:
    """What Hydra tells a mode about this process: where it runs and what it was asked."""

    run_dir: Path
    launch_dir: Path
    overrides: list[str]
    choices: dict


def mode_of(node: DictConfig, multirun: bool) -> str:
    """The one place that decides which mode this process runs."""
    if multirun:
        return "sweep_job"  # each job runs in a fresh `python -m launcher` process of its own mode
    mode = node.mode.value  # the composed node holds the schema's Mode
    if mode == "train" and local_worker_count(node.strategy) > 0:
        return "local_workers"
    if mode == "train" and node.train.get("max_restarts", 0) > 0 and not supervised() and not node.get("explain"):
        return "supervised"  # the training runs in a child this process restarts when it fails
    return mode


def _train(node, at: Invocation) -> int:
    return launch_training(node, at.run_dir, at.launch_dir, at.choices)


def _evaluate(node, at: Invocation) -> int:
    return evaluate(node, at.run_dir, at.launch_dir, at.overrides)


def _doctor(node, at: Invocation) -> int:
    return launch_doctor(
        node, at.run_dir, at.launch_dir, " ".join(o for o in at.overrides if not o.startswith("mode="))
    )


def _local_workers(node, at: Invocation) -> int:
    """Not in the run dir's shell: the chief worker, a process of its own, locks the run dir. With
    train.max_restarts the whole job restarts when a worker fails."""

    def attempt(restart: int, reason: str | None) -> Attempt:
        os.environ[RESTART_ENV] = str(restart)  # the workers' tags; and they never supervise themselves
        if reason:
            os.environ[REASON_ENV] = reason[:2000]
        return local_workers_attempt(at.overrides, int(node.strategy.local_workers), at.run_dir, at.launch_dir)

    return supervise(attempt, int(node.train.max_restarts), float(node.train.restart_backoff))


def _supervised(node, at: Invocation) -> int:
    """train.max_restarts > 0: this process only watches; each attempt trains in a child process."""
    attempts = child_attempts(at.overrides, at.run_dir, at.launch_dir)
    return supervise(attempts, int(node.train.max_restarts), float(node.train.restart_backoff))


# mode -> handler; each returns the process's exit code. None of these modules loads TensorFlow when imported
# (the sweep process imports this one and never loads it; tests/structure/test_architecture.py checks).
MODES: dict[str, Callable[[DictConfig, Invocation], int]] = {
    "train": _train,
    "eval": _evaluate,
    "predict": _evaluate,
    "doctor": _doctor,
    "local_workers": _local_workers,
    "supervised": _supervised,
}


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(node: DictConfig) -> float | None:
    global _task_started
    _task_started = True
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from hydra.utils import get_original_cwd

    hydra_config = HydraConfig.get()
    mode = mode_of(node, hydra_config.mode == RunMode.MULTIRUN)
    if mode == "sweep_job":
        from launcher.sweep.job import run_job

        # A fresh process per job; its return value is the objective sweepers such as Optuna optimise.
        return run_job(node, hydra_config)
    at = Invocation(
        Path(hydra_config.runtime.output_dir),
        Path(get_original_cwd()),
        list(hydra_config.overrides.task),
        dict(hydra_config.runtime.choices),
    )
    code = MODES[mode](node, at)
    asked = node.mode.value  # train, eval, predict, doctor: what a supervised or local-workers launch does too
    if run_dirs.leaves_no_run_dir(asked, bool(node.get("explain")), code):
        run_dirs.discard_new_run_dir(at.run_dir)
    if code:
        sys.exit(code)
    return None


def every_key() -> list[str]:
    """Every dotted key any choice declares, and the config groups: what an override may name."""
    keys = schema_keys(Config)
    for group, schemas in (("model", MODEL_SCHEMAS), ("dataset", DATASET_SCHEMAS)):
        keys += sorted({f"{group}.{k}" for schema in schemas.values() for k in schema_keys(schema)})
    return keys + list(group_options())


def group_options() -> dict[str, list[str]]:
    """The shipped config groups and their options (a person's own, from --config-dir or a search path, aside)."""
    groups = [p for p in Path(CONF_DIR).iterdir() if p.is_dir()]
    return {g.name: sorted(p.stem for p in g.glob("*.yaml")) for g in groups}


def plugin_search_path(argv: list[str]) -> list[str]:
    """Installed plugins' config packages (entry points `launcher.configs`) join Hydra's search path, after any
    hydra.searchpath the person gave: their model/dataset/experiment YAML become choices."""

    packages = [f"pkg://{p}" for p in config_packages()]
    if not packages:
        return argv
    given = [a for a in argv if a.startswith("hydra.searchpath=")]
    rest = [a for a in argv if not a.startswith("hydra.searchpath=")]
    listed = given[-1].split("=", 1)[1].strip("[]") if given else ""
    paths = [p.strip() for p in listed.split(",") if p.strip()] + packages
    return [*rest, f"hydra.searchpath=[{','.join(paths)}]"]


def register_search_sweeper() -> None:
    """Hydra finds sweepers by walking the `hydra_plugins` namespace, which an editable install of the launcher
    does not expose to that walk: register ours by hand (a no-op when Hydra found it)."""
    from hydra.core.plugins import Plugins

    Plugins.instance().register(SearchSweeper)


def compose_fix(arguments: list[str]) -> str:
    """The fix under Hydra's compose error: the grammar's for an override it cannot parse (a bracket left open, a
    value nested hundreds deep), else the closest keys and options to what was mistyped, else the general one."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides, skip = [], False
    for argument in arguments:
        if not skip and not argument.startswith("-"):
            overrides.append(argument)
        skip = argument in VALUED_FLAGS
    if yaml_files.broken:  # a config file, not an override
        return yaml_files.YAML_FIX
    deepest = max((_nesting(o) for o in overrides), default=0)
    if deepest > DEEPEST:  # parsed, then composed past Python's recursion limit (a RecursionError)
        return f"fix: a value nested {deepest} deep is more than a config holds (at most {DEEPEST}); write it flatter."
    try:
        OverridesParser.create().parse_overrides(overrides)
    except Exception:  # Hydra's grammar errors
        return GRAMMAR_FIX
    return "\n".join(typo_hints(arguments, every_key(), group_options())) or COMPOSE_FIX


def _nesting(text: str) -> int:
    depth = deepest = 0
    for char in text:
        depth += (char in "[{") - (char in "]}")
        deepest = max(deepest, depth)
    return deepest


def entry() -> None:
    """Run Hydra; when composing the config fails, add the fix to Hydra's message."""
    global _task_started
    _task_started = False  # a fresh start for each call (the test suite calls it in-process)
    sweep_callback.started = False
    yaml_files.broken.clear()
    register_search_sweeper()
    yaml_files.report_yaml_errors_compactly()
    sys.argv[1:] = plugin_search_path(sys.argv[1:])
    try:
        try:
            with run_mode.run_without_mode_compose(sys.argv[1:]):
                main()
        except run_mode.ModeSetByConfig:
            main()  # a config file set hydra.mode: Hydra's own reading of it
    except SystemExit as exit_:
        if exit_.code == EXIT_FAILED and not _task_started and not sweep_callback.started:  # Hydra's compose errors
            print(compose_fix(sys.argv[1:]), file=sys.stderr)
        raise
    finally:
        yaml_files.broken.clear()
        _settle_background()


def _settle_background() -> None:
    """The launcher's own threads end before the interpreter does (one caught inside TensorFlow at shutdown aborts
    a finished launch with exit 134: `launcher.background`)."""
    left = background.settle()
    if left:
        print(f"WARNING: still running after {background.SETTLE_SECONDS:g} s: {', '.join(left)}", file=sys.stderr)


if __name__ == "__main__":
    entry()
