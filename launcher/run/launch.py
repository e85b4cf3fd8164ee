"""The Hydra task for one launch: run it, write outcome.json, turn the result into an exit code.

Exit codes: 0 finished; 2 config refused (ConfigError); 1 training failed; 128 + signal when
preempted (130 SIGINT, 143 SIGTERM). Hydra's own compose errors exit 1 before this runs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from omegaconf import DictConfig

from launcher.config.errors import ConfigError
from launcher.console import quiet_tensorflow_logs
from launcher.files import OUTCOME_FILE, write_json_atomic

EXIT_CONFIG_ERROR = 2
EXIT_TRAINING_FAILED = 1


def launch_in_hydra(cfg: DictConfig, hydra_cfg) -> None:
    """The run dir and launch dir come from Hydra; a non-zero result exits the process."""
    from hydra.utils import get_original_cwd

    run_dir, launch_dir = Path(hydra_cfg.runtime.output_dir), Path(get_original_cwd())
    strategy = cfg.strategy
    mode = getattr(cfg.mode, "value", cfg.mode)
    if mode in ("eval", "predict"):
        from launcher.run.evaluate import evaluate_in_hydra

        code = evaluate_in_hydra(cfg, hydra_cfg)
    elif getattr(strategy.kind, "value", strategy.kind) == "multi_worker" and strategy.get("local_workers", 0) > 0:
        from launcher.run.local_workers import run_local_workers

        code = run_local_workers(list(hydra_cfg.overrides.task), int(strategy.local_workers), run_dir, launch_dir)
    else:
        code = run(cfg, run_dir, launch_dir, dict(hydra_cfg.runtime.choices))
    if code:
        sys.exit(code)


def run(cfg: DictConfig, run_dir: Path, launch_dir: Path, choices: dict | None = None) -> int:
    """One launch; returns its exit code and leaves outcome.json in the run dir.

    The run dir's lock is held from before the first write to after outcome.json: a second
    launch on the same dir is refused and writes nothing there.
    """
    quiet_tensorflow_logs(bool(cfg.get("tf_logs", False)))
    from launcher.run.lock import RunDirBusy, RunDirLock

    run_dir = worker_run_dir(cfg, run_dir)

    try:
        with RunDirLock(run_dir):
            return _run_locked(cfg, run_dir, launch_dir, choices)
    except RunDirBusy as err:
        print(f"\n{err}\n", file=sys.stderr, flush=True)
        return EXIT_CONFIG_ERROR


def worker_run_dir(cfg: DictConfig, run_dir: Path) -> Path:
    """Multi-worker: worker i > 0 runs in <run dir>/workers/worker<i> (the chief in the run dir itself), so
    every worker can be given the same run dir (name=, a shared filesystem); checkpoint.directory defaults to
    the chief's <run dir>/checkpoints, which the other workers resume from."""
    strategy = cfg.strategy
    if getattr(strategy.kind, "value", strategy.kind) != "multi_worker" or strategy.get("local_workers", 0):
        return run_dir
    from omegaconf import open_dict

    from launcher.plan.cluster import find_cluster
    from launcher.plan.environment import read_slurm, read_tf_config

    cluster, _ = find_cluster(strategy, read_tf_config(), read_slurm())
    if cluster is None or cluster.is_chief:
        return run_dir  # a bad spec is refused by the resolver, in this run dir
    with open_dict(cfg):
        if not str(cfg.checkpoint.get("directory", "")):
            cfg.checkpoint.directory = str(run_dir / "checkpoints")
    return run_dir / "workers" / f"worker{cluster.index}"


def _run_locked(cfg: DictConfig, run_dir: Path, launch_dir: Path, choices: dict | None) -> int:
    from launcher.run.runner import execute

    try:
        outcome = execute(cfg, run_dir, launch_dir, choices or {})
    except ConfigError as err:
        print(f"\n{err}\n", file=sys.stderr, flush=True)
        write_outcome(run_dir, None, "REFUSED", str(err))
        return EXIT_CONFIG_ERROR
    result = outcome.result
    final = result.final if result else {}
    history = [e.logs for e in result.epochs] if result else []
    # Statuses as MLflow names them.
    status = "KILLED" if outcome.exit_code is not None else "FAILED" if outcome.error else "FINISHED"
    write_outcome(run_dir, outcome.run_id, status, outcome.error, final, history,
                  weights_sha256=outcome.weights_sha256)
    if outcome.exit_code is not None:
        return outcome.exit_code
    return EXIT_TRAINING_FAILED if outcome.error else 0


def write_outcome(run_dir: Path, run_id: str | None, status: str, error: str | None,
                  metrics: dict | None = None, history: list | None = None, weights_sha256: str | None = None,
                  mode: str | None = None) -> None:
    """outcome.json in the run dir: how a sweep (or a benchmark, or the local multi-worker launcher) learns
    what its job did."""
    run_dir.mkdir(parents=True, exist_ok=True)
    data = {"run_id": run_id, "status": status, "error": error, "metrics": metrics or {}, "history": history or [],
            "pid": os.getpid(), "weights_sha256": weights_sha256}
    if mode:
        data["mode"] = mode  # eval / predict: not a training run
    write_json_atomic(run_dir / OUTCOME_FILE, data)
