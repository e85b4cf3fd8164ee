"""One run, start to finish: resolve, configure, build in scope, train, track.

    config -> probe -> resolve -> Plan -> runtime -> data -> build -> engine -> MLflow
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from launcher import runtime
from launcher.errors import ConfigError

EXIT_CONFIG_ERROR = 2
EXIT_TRAINING_FAILED = 1


@dataclass
class Outcome:
    """What one launch produced (tests and sweeps read it; the CLI turns it into an exit code)."""

    plan: Any
    result: Any = None  # engine.FitResult, None for explain=true
    run_id: str | None = None
    run_dir: Path | None = None
    error: str | None = None
    exit_code: int | None = None
    model: Any = None


def main_in_hydra(cfg: DictConfig) -> float | None:
    """Hydra task: the run dir and launch dir come from Hydra; errors become exit codes."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from hydra.utils import get_original_cwd

    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN:
        from launcher.sweep import run_job

        # A fresh process per job; a failed job does not stop the sweep. The return value
        # is the job's objective (what hparams_search sweepers such as Optuna optimise).
        return run_job(cfg, hydra_cfg)
    run_dir = Path(hydra_cfg.runtime.output_dir)
    choices = dict(hydra_cfg.runtime.choices)
    code = run(cfg, run_dir, Path(get_original_cwd()), choices)
    if code:
        sys.exit(code)


def run(cfg: DictConfig, run_dir: Path, launch_dir: Path, choices: dict | None = None) -> int:
    runtime.quiet_tensorflow_logs(bool(cfg.get("tf_logs", False)))
    try:
        outcome = execute(cfg, run_dir, launch_dir, choices or {})
    except ConfigError as err:
        print(f"\n{err}\n", file=sys.stderr, flush=True)
        _write_outcome(run_dir, None, "REFUSED", str(err))
        return EXIT_CONFIG_ERROR
    final = outcome.result.final if outcome.result else {}
    history = [e.logs for e in outcome.result.epochs] if outcome.result else []
    status = "KILLED" if outcome.exit_code is not None else "FAILED" if outcome.error else "FINISHED"  # as in MLflow
    _write_outcome(run_dir, outcome.run_id, status, outcome.error, final, history)
    if outcome.exit_code is not None:
        return outcome.exit_code
    return EXIT_TRAINING_FAILED if outcome.error else 0


def _write_outcome(run_dir: Path, run_id, status: str, error, metrics: dict | None = None,
                   history: list | None = None) -> None:
    """outcome.json in the run dir: how a sweep (or a benchmark) learns what its job did."""
    import json

    run_dir.mkdir(parents=True, exist_ok=True)
    data = {"run_id": run_id, "status": status, "error": error, "metrics": metrics or {}, "history": history or []}
    (run_dir / "outcome.json").write_text(json.dumps(data))


def execute(cfg_node: DictConfig, run_dir: Path, launch_dir: Path, choices: dict | None = None) -> Outcome:
    """Resolve, print and save the Plan, then train unless explain=true. Raises ConfigError."""
    choices = choices or {}
    from launcher.environment import probe
    from launcher.resolve import resolve, schedule

    config = OmegaConf.to_object(cfg_node)
    env = probe()
    plan = resolve(config, env)
    strategy = runtime.configure(plan, config.seed, config.deterministic)
    source = _load_data(config)
    schedule(config, plan, source.num_train, source.num_val)

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "plan.yaml").write_text(plan.to_yaml())
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg_node, resolve=True))
    print(plan.render(), flush=True)
    if config.explain:
        print(f"\nexplain=true: nothing trained. Plan written to {run_dir / 'plan.yaml'}")
        return Outcome(plan=plan, run_dir=run_dir)
    if config.tracking.enabled:
        from launcher.tracking import check_reachable

        check_reachable(config.tracking.uri)
    return _train(config, cfg_node, plan, source, env, strategy, run_dir, launch_dir, choices)


def _load_data(config):
    from launcher.registry import DATASETS, MODELS

    source = DATASETS.get(config.dataset.name).load(config.dataset)
    MODELS.get(config.model.name).check(config.model, source)
    return source


def _train(config, cfg_node, plan, source, env, strategy, run_dir, launch_dir, choices) -> Outcome:
    from launcher.build import build
    from launcher.callbacks import make_callbacks
    from launcher.engine import Engine, Preempted
    from launcher.run_hooks import PreemptionGuard, RunHooks, export_model

    # Build and restore first: an incompatible checkpoint is a ConfigError, raised
    # before MLflow hears of this launch.
    built = build(config, plan, source, strategy)
    checkpointer, restored = _restore(config, cfg_node, built, run_dir)
    position, sidecar = restored if restored else (None, {})
    layout = {"strategy": plan["strategy"], "replicas": plan["replicas"], "global_batch": plan["batch.global"]}
    if restored:
        _explain_resume(plan, position, checkpointer.previous_state().get("layout"), layout, run_dir)
    resumed_run = sidecar.get("mlflow_run_id") if restored else None
    tracker = _start_tracking(config, cfg_node, plan, env, run_dir, launch_dir, choices, resumed_run)
    if checkpointer:
        checkpointer.record(tracker.run_id, layout)
    if restored and tracker.resumed:
        tracker.set_tags({"plan.resume": plan["resume"]})
    is_chief = plan.get("process.is_chief", True)
    flops, peak = _utilization_inputs(config, plan, built.model, tracker)
    outcome = Outcome(plan=plan, run_id=tracker.run_id, run_dir=run_dir, model=built.model)
    status = "FAILED"
    with PreemptionGuard(config.checkpoint.save_on_preemption) as guard:
        hooks = RunHooks(
            checkpointer=checkpointer, tracker=tracker, guard=guard, steps_per_epoch=plan["train.steps_per_epoch"],
            checkpoint_cfg=config.checkpoint, is_chief=is_chief, run_dir=run_dir, model=built.model,
            history=sidecar.get("history"), best=sidecar.get("best"), early_stopping=sidecar.get("early_stopping"),
            flops_per_example=flops, peak_flops=peak, profiler=_profiler(config, run_dir, is_chief),
        )
        if restored:
            healed = hooks.heal_metric_gaps()
            print(f"Resuming at epoch {position.epoch + 1}, step {position.step_in_epoch} "
                  f"(global step {position.global_step})" + (f"; re-logged {healed} epoch(s) of metrics" if healed else ""),
                  flush=True)
        try:
            engine = Engine(built, plan, source, seed=config.seed, shuffle_buffer=config.dataset.shuffle_buffer,
                            callbacks=make_callbacks(config.train))
            result = engine.fit(config.train.epochs, start=position, hooks=hooks)
            if config.checkpoint.export_model and is_chief:
                export_model(built.model, run_dir / "model.keras")
                tracker.log_artifact(run_dir / "model.keras", "model")
                if hooks.best_model_path:
                    tracker.log_artifact(hooks.best_model_path, "model")
            status = "FINISHED"
            outcome.result = result
            _summary(result, plan, run_dir, tracker)
            return outcome
        except Preempted as stop:
            status = "KILLED"
            print(f"\nPreempted: {stop}. Checkpoint saved; re-run the same command to resume.", flush=True)
            outcome.error = str(stop)
            outcome.exit_code = 128 + stop.signum
            return outcome
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        except Exception as err:
            traceback.print_exc()
            print("\nTraining failed; the MLflow run is marked FAILED.", file=sys.stderr)
            outcome.error = f"{type(err).__name__}: {err}"
            return outcome
        finally:
            tracker.end(status)


def _explain_resume(plan, position, previous: dict | None, layout: dict, run_dir: Path) -> None:
    """Resuming under another strategy or replica count is allowed; the Plan says so."""
    where = f"epoch {position.epoch + 1}, step {position.step_in_epoch} (global step {position.global_step})"
    if not previous or previous == layout:
        plan.decide("resume", where, "checkpoint written with the same strategy, replicas and global batch")
    else:
        before = ", ".join(f"{k}={previous.get(k)}" for k in layout)
        now = ", ".join(f"{k}={v}" for k, v in layout.items())
        reason = f"allowed: checkpoint written with {before}; now {now}. Weights and optimizer state carry over"
        if previous.get("global_batch") != layout["global_batch"] and position.step_in_epoch:
            examples = position.step_in_epoch * previous["global_batch"]
            position.step_in_epoch = examples // layout["global_batch"]
            reason += (f"; the data position ({examples} examples into the epoch) is rounded down to "
                       f"{position.step_in_epoch} whole batches of {layout['global_batch']}")
            plan.warn("Resumed with a different global batch: the run is not step-for-step identical to an "
                      "uninterrupted one.")
        plan.decide("resume", where, reason)
    print(f"  resume  {plan['resume']}  {plan.reason('resume')}", flush=True)
    (run_dir / "plan.yaml").write_text(plan.to_yaml())


def _utilization_inputs(config, plan, model, tracker) -> tuple[float, float]:
    """Training FLOPs per example and this machine's matmul peak for the compute dtype."""
    if not config.train.measure_utilization:
        return 0.0, 0.0
    from launcher.utilization import COMPUTE_DTYPE, matmul_peak, training_flops_per_example

    flops = training_flops_per_example(model)
    if not flops:
        return 0.0, 0.0
    dtype = COMPUTE_DTYPE[plan["precision.policy"]]
    peak = matmul_peak(dtype)
    if not tracker.resumed:
        tracker.log_params({"derived.train_flops_per_example": int(flops),
                            f"derived.matmul_peak_{dtype}_gflops": round(peak / 1e9, 1)})
    return flops, peak


def _profiler(config, run_dir: Path, is_chief: bool):
    profile = config.train.profile
    if profile.steps <= 0 or not is_chief:
        return None
    from launcher.profiling import StepProfiler

    return StepProfiler(run_dir / "profile", profile.skip_steps, profile.steps)


def _restore(config, cfg_node, built, run_dir):
    from launcher.checkpoint import Checkpointer, set_aside

    if not config.checkpoint.enabled:
        return None, None
    directory = run_dir / "checkpoints"
    if str(config.checkpoint.resume) == "never":
        set_aside(directory)
    model_config = OmegaConf.to_container(cfg_node.model, resolve=True, enum_to_str=True)
    checkpointer = Checkpointer(config.checkpoint, directory, built, model_config)
    return checkpointer, checkpointer.restore()


def _start_tracking(config, cfg_node, plan, env, run_dir, launch_dir, choices, resumed_run=None):
    from launcher.tracking import NullTracker, Tracker, flatten, resolve_uri

    tr = config.tracking
    if not tr.enabled or not plan.get("process.is_chief", True):
        return NullTracker()
    uri = resolve_uri(tr.uri, launch_dir)
    name = tr.run_name or config.name or "-".join(
        str(choices.get(k, "?")) for k in ("model", "dataset", "precision", "strategy")
    )
    tracker = Tracker(uri, tr.experiment, name, launch_dir / "outputs" / "mlartifacts", resumed_run,
                      parent_run_id=tr.parent_run_id or None)
    if tracker.resumed:
        return tracker
    container = OmegaConf.to_container(cfg_node, resolve=True, enum_to_str=True)
    params = flatten(container)
    params.update({f"derived.{k}": plan[k] for k in _DERIVED if k in plan})
    tracker.log_params(params)
    tags = plan.tags()
    tags.update({"tf_version": env.tf_version, "keras_version": env.keras_version,
                 "devices": env.describe_devices(), "run_dir": str(run_dir)})
    if tr.sweep_id:
        tags.update({"sweep_id": tr.sweep_id, "sweep.role": "child", "sweep.overrides": name})
    tracker.set_tags(tags)
    tracker.log_artifact(run_dir / "plan.yaml")
    tracker.log_artifact(run_dir / "config.yaml")
    return tracker


_DERIVED = (
    "replicas", "batch.global", "batch.per_replica", "lr", "warmup.steps",
    "train.steps_per_epoch", "train.total_steps", "precision.policy", "xla", "step",
    "loss_scale.optimizer",
)


def _summary(result, plan, run_dir, tracker) -> None:
    final = result.final
    if not result.epochs:
        print("\nNothing to train: the checkpoint already covers every epoch.")
    print("\nDone." + (" (stopped early)" if result.stopped_early else ""))
    for key in ("loss", "accuracy", "val_loss", "val_accuracy", "examples_per_sec"):
        if key in final:
            print(f"  {key:<17}{final[key]:.4f}")
    print(f"  run dir          {run_dir}")
    print(f"  MLflow           {tracker.ui_hint}")
