"""The prepare step: probe, resolve, start the runtime, load the data, schedule; every refusal collected.

The resolver's, the data's, the schedule's, a test fault's, a trial's, the checkpoint directory's and the
tracking server's problems are refused together, in one ConfigError, before anything is written; then the
Plan is printed and saved beside config.yaml.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from launcher.config.errors import ConfigError, raise_if_any
from launcher.config.schema import Config, OptimizerUpdate, PrecisionName, Unreachable, as_dict
from launcher.config.study_storage import shown
from launcher.console import keep
from launcher.files import CONFIG_FILE, PLAN_FILE, TUNING_FILE, write_text_atomic
from launcher.launch.checkpointer import check_writable
from launcher.launch.faults import OPT_IN, armed, ignored
from launcher.launch.remote import RemoteCheckpoints, is_remote
from launcher.launch.review import collecting, review
from launcher.launch.run_dirs import has_plan
from launcher.launch.trial import open_trial
from launcher.launch.tuning import command_line, copy_table
from launcher.launch.tuning import decide as decide_step_by_timing
from launcher.plan.continuation import Continuation, continue_run
from launcher.plan.decisions import ContinuationPlan, FaultPlan, Plan
from launcher.plan.environment import probe, probe_without_tensorflow
from launcher.plan.resolve import resolve_all, wants_measurements
from launcher.tracking.client import check_experiment_active
from launcher.tracking.uri import check_reachable, redact, resolve_uri
from launcher.train import runtime


@dataclass
class Prepared:
    """What the prepare step found, for the steps after it."""

    plan: Plan
    env: Any  # the machine, probed (launcher.plan.environment.Environment)
    source: Any  # the loaded data (launcher.train.data.DataSource)
    strategy: Any  # the tf.distribute strategy, made before any other TF op
    tracking_uri: str  # tracking.uri, or its fallback when the server is away (tracking.on_unreachable=local)
    init_source: Any = None  # model.init_from, found (launcher.launch.init_source.InitSource)
    trial: Any = None  # the hparams_search trial this run is (launcher.launch.trial.Trial), if any
    remote: RemoteCheckpoints | None = None  # checkpoint.directory's object store, when it names one


def settings_of(config: Config) -> dict:
    """The config as written and logged (config.yaml, MLflow params): never the credentials of the tracking URI,
    the checkpoint store or a search's study storage."""
    settings = as_dict(config)
    settings["tracking"]["uri"] = redact(settings["tracking"]["uri"])
    settings["sweep"]["study"] = shown(str(settings["sweep"]["study"]))
    settings["checkpoint"]["directory"] = redact(str(settings["checkpoint"]["directory"]))
    return settings


def checkpoint_directory(config: Config, run_dir: Path, launch_dir: Path) -> Path:
    """checkpoint.directory (relative to the launch dir), else <run dir>/checkpoints."""
    configured = str(config.checkpoint.directory).strip()
    if not configured or is_remote(configured):  # an object store's local staging copy is in the run dir
        return run_dir / "checkpoints"
    path = Path(configured).expanduser()
    return path if path.is_absolute() else launch_dir / path


def save_plan(plan: Plan, run_dir: Path) -> None:
    write_text_atomic(run_dir / PLAN_FILE, plan.to_yaml())


def preflight(config: Config, settings: dict, run_dir: Path, launch_dir: Path) -> Prepared:
    """Check everything, refuse every problem at once (ConfigError), then print and save the Plan."""
    continuation = continued_run(config, settings, run_dir, checkpoint_directory(config, run_dir, launch_dir))
    if continuation is not None:
        keep_first_choices(config, continuation)
    env = probe(measure=wants_measurements(config), refresh=config.train.remeasure_matmul)
    env, tune_record = decide_step_by_timing(config, env, command_line(), launch_dir)
    checked = review(config, env, lambda plan: runtime.configure(plan, config.seed, config.deterministic))
    problems = checked.problems
    prepared = Prepared(checked.plan, env, checked.source, checked.strategy, config.tracking.uri, checked.init_source)
    if tune_record is not None:
        prepared.plan = prepared.plan.with_record(tune_record)
    if continuation is not None:
        problems.extend(continuation.refused)
        prepared.plan = prepared.plan.with_record(_continuation_record(continuation))
    _arm_fault(prepared, problems)
    if not config.explain:
        _open_trial(config, prepared, problems)
    if config.checkpoint.enabled and not config.explain:
        collecting(problems, check_writable, checkpoint_directory(config, run_dir, launch_dir))
        if is_remote(config.checkpoint.directory):
            prepared.remote = collecting(problems, RemoteCheckpoints, str(config.checkpoint.directory).strip())
            if prepared.remote is not None:
                collecting(problems, prepared.remote.check_writable)
    if config.tracking.enabled and not config.explain:
        _check_tracking_server(config, prepared, problems, launch_dir)
    raise_if_any(problems)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not (config.explain and has_plan(run_dir)):  # an explain never writes over a run's own Plan
        save_plan(prepared.plan, run_dir)
        write_text_atomic(run_dir / CONFIG_FILE, OmegaConf.to_yaml(settings))
    if tune_record is not None:
        copy_table(config, env, run_dir / TUNING_FILE)
    show_plan(prepared.plan, prepared.plan.render(whole=config.explain))  # explain: the Plan is what was asked
    if not prepared.plan.is_chief:
        print(f"Plan: the chief's (worker 0 prints it); this worker's is in {run_dir / PLAN_FILE}", flush=True)
    return prepared


def show_plan(plan: Plan, text: str) -> None:
    """Plan lines on the console once per job, the chief's (the workers agree on the Plan before training); the
    other workers keep theirs in their console.log."""
    if plan.is_chief:
        print(text, flush=True)
    else:
        keep(text)


FIRST_PASS_NOTE = (
    "  (the config's own problems, found first: the data, the model and the tracking server are checked once "
    "these pass)"
)


def first_pass(config: Config, run_dir: Path, launch_dir: Path) -> None:
    """The rules' refusals before TensorFlow loads (a refusal then costs 1.1 CPU-s, not 6.8, on a 2-core AMD EPYC
    without AMX), where the machine is seen exactly without it (`probe_without_tensorflow`) and nothing is timed
    (tune=off). Problems only the data, the model or the tracking server show are found by `preflight`, as are
    these again when this pass is skipped."""
    if config.tune != "off":
        return
    env = probe_without_tensorflow(wants_measurements(config), config.train.remeasure_matmul)
    if env is None:
        return
    config = copy.deepcopy(config)  # the pins below are this pass's own
    continuation = continued_run(
        config, settings_of(config), run_dir, checkpoint_directory(config, run_dir, launch_dir)
    )
    problems = list(continuation.refused) if continuation is not None else []
    if continuation is not None:
        keep_first_choices(config, continuation)
    problems.extend(resolve_all(config, env)[1])
    if problems:
        raise ConfigError(problems, FIRST_PASS_NOTE)


def continued_run(config: Config, settings: dict, run_dir: Path, checkpoints: Path) -> Continuation | None:
    """This launch continues the run in `run_dir` (an earlier launch's config.yaml and plan.yaml, and a checkpoint
    it will resume): what it keeps and changes. None: a new run, or one that starts over."""
    if not config.checkpoint.enabled or str(config.checkpoint.resume) != "auto":
        return None  # off, starting over (never), or a checkpoint the person named: not this run's own thread
    files = run_dir / CONFIG_FILE, run_dir / PLAN_FILE
    if not all(f.is_file() for f in files) or not any(checkpoints.glob("ckpt-*.index")):
        return None
    before = yaml.safe_load(files[0].read_text()) or {}
    decisions = (yaml.safe_load(files[1].read_text()) or {}).get("decisions", {})
    return continue_run(before, settings, decisions, config.name)


def keep_first_choices(config: Config, continuation: Continuation) -> None:
    """Pin what `auto` chose at the run's first launch (a resume never re-measures: under other load it flipped
    XLA and with it the step, drop_remainder and the steps per epoch)."""
    pins = continuation.pins
    if "precision.name" in pins:
        config.precision.name = PrecisionName(str(pins["precision.name"]))
    if "xla" in pins:
        config.xla = "true" if pins["xla"] in (True, "True", "true") else "false"
    if "optimizer.update" in pins:
        config.optimizer.update = OptimizerUpdate(str(pins["optimizer.update"]))
    if "train.steps_per_execution" in pins:
        config.train.steps_per_execution = int(pins["train.steps_per_execution"])
    if "tune" in pins:
        config.tune = "off"


def _continuation_record(continuation: Continuation) -> ContinuationPlan:
    kept, changed = continuation.describe_pins(), continuation.describe_changes()
    why_kept = "auto chose these at the run's first launch (plan.yaml); a continued run keeps them"
    why_changed = "may change when a run continues: applied from this launch on (MLflow tags changed.<key>)"
    return ContinuationPlan.of(
        kept=(kept, why_kept) if kept else None, changed=(changed, why_changed) if changed else None
    )


def _arm_fault(prepared: Prepared, problems: list) -> None:
    """A test's injected fault: checked now (a malformed one is refused with the rest) and put in the Plan,
    so plan.yaml and the MLflow tags say the run was sabotaged on purpose."""
    fault = collecting(problems, armed)
    if fault is not None:
        why = f"test-only fault injection (LAUNCHER_FAULT with {OPT_IN})"
        prepared.plan = prepared.plan.with_record(FaultPlan.of(armed=(fault.describe(), why)))
    elif warning := ignored():
        prepared.plan = prepared.plan.with_warning(warning)


def _open_trial(config: Config, prepared: Prepared, problems: list) -> None:
    """An hparams_search job: its study trial, which it reports to (and is pruned by); a Plan record."""
    multi_worker = prepared.plan.cluster is not None
    opened = collecting(problems, open_trial, config.sweep, config.train.val_every_steps, multi_worker)
    if opened is not None:
        prepared.trial, record = opened
        prepared.plan = prepared.plan.with_record(record)


def _check_tracking_server(config: Config, prepared: Prepared, problems: list, launch_dir: Path) -> None:
    """An unreachable server refuses the launch, or (tracking.on_unreachable=local) is swapped for the
    local store with a warning in the Plan. A reachable one's experiment must not be a deleted one."""
    tr = config.tracking
    unreachable = []
    collecting(unreachable, check_reachable, tr.uri)
    if not unreachable:
        if prepared.plan.is_chief:  # the one that tracks
            collecting(problems, check_experiment_active, resolve_uri(tr.uri, launch_dir), tr.experiment)
        return
    if tr.on_unreachable != Unreachable.local:
        problems.extend(unreachable)
        return
    prepared.tracking_uri = tr.fallback_uri
    prepared.plan = prepared.plan.with_warning(
        f"tracking server {redact(tr.uri)} unreachable at start "
        f"({unreachable[0].expected}); tracking.on_unreachable=local: logging to "
        f"{tr.fallback_uri}"
    )
