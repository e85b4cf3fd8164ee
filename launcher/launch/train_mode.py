"""`mode=train`: one launch in its run dir, inside the shell (lock, logs, exit codes, outcome.json).

Exit codes: 0 finished; 2 config refused (ConfigError); 1 training failed; 128 + signal when
preempted (130 SIGINT, 143 SIGTERM). Hydra's own compose errors exit 1 before this runs.
"""

from __future__ import annotations

import functools
from pathlib import Path

from omegaconf import DictConfig, open_dict

from launcher.config.errors import ConfigError
from launcher.config.schema import Config, to_config
from launcher.config.strategies import strategy_of
from launcher.files import OUTCOME_FILE
from launcher.launch.finished import finished_already, nothing_to_do
from launcher.launch.shell import run_in_shell
from launcher.outcome import OutcomeRecord
from launcher.plan.cluster import find_cluster
from launcher.plan.environment import read_slurm, read_tf_config
from launcher.supervise.local_workers import local_worker_count


def launch(node: DictConfig, run_dir: Path, launch_dir: Path, choices: dict | None = None) -> int:
    """One launch; returns its exit code and leaves outcome.json in the run dir.

    The run dir's lock is held from before the first write to after outcome.json: a second
    launch on the same dir is refused and writes nothing there.
    """
    run_dir = worker_run_dir(node, run_dir)
    done = _finished_already(node, run_dir, launch_dir)
    if done is not None:
        config, record, checkpoints = done
        said = functools.partial(nothing_to_do, config, record, run_dir, launch_dir, checkpoints)
        return run_in_shell(said, run_dir, "train", None)
    return run_in_shell(
        lambda: train(node, run_dir, launch_dir, choices or {}),
        run_dir,
        "train",
        bool(node.get("tf_logs", False)),
        first_pass=lambda: check_before_tensorflow(node, run_dir, launch_dir),
        checkpoints=own_checkpoint_directory(node, run_dir, launch_dir),
    )


def _finished_already(node: DictConfig, run_dir: Path, launch_dir: Path) -> tuple[Config, OutcomeRecord, Path] | None:
    """A one-process training whose run finished with these same settings (`launcher.launch.finished`)."""
    if not (run_dir / OUTCOME_FILE).is_file():  # a new run dir (every timestamped one): nothing finished in it
        return None
    from launcher.launch.preflight import checkpoint_directory, settings_of  # fsspec, numpy: not to route

    if not strategy_of(node.strategy.kind).single_process or local_worker_count(node.strategy):
        return None
    try:
        config = to_config(node)
    except ConfigError:
        return None  # refused by the launch, with every other problem
    checkpoints = checkpoint_directory(config, run_dir, launch_dir)
    record = finished_already(config, settings_of(config), run_dir, checkpoints)
    return None if record is None else (config, record, checkpoints)


def own_checkpoint_directory(node: DictConfig, run_dir: Path, launch_dir: Path) -> Path | None:
    """A local `checkpoint.directory` outside the run dir, of a one-process run: held for the launch (a multi-worker
    job's workers all read the chief's; an object store's is staged in the run dir)."""
    configured = str(node.checkpoint.get("directory") or "").strip()
    if not configured or "://" in configured or not node.checkpoint.get("enabled", True):
        return None
    if not strategy_of(node.strategy.kind).single_process or local_worker_count(node.strategy):
        return None
    path = Path(configured).expanduser()
    path = path if path.is_absolute() else launch_dir / path
    return None if path.resolve().is_relative_to(run_dir.resolve()) else path


def check_before_tensorflow(node: DictConfig, run_dir: Path, launch_dir: Path) -> None:
    """The config's own problems (unknown keys, the rules), refused before TensorFlow loads."""
    from launcher.launch.preflight import first_pass  # fsspec and numpy: not for a process that only routes

    first_pass(to_config(node), run_dir, launch_dir)


def train(node: DictConfig, run_dir: Path, launch_dir: Path, choices: dict) -> OutcomeRecord:
    """Resolve, build, train (or explain); the outcome record of what happened. Raises ConfigError."""
    from launcher.launch.training import execute

    return execute(node, run_dir, launch_dir, choices)


def worker_run_dir(node: DictConfig, run_dir: Path) -> Path:
    """Multi-worker: worker i > 0 runs in <run dir>/workers/worker<i> (the chief in the run dir itself), so
    every worker can be given the same run dir (name=, a shared filesystem); checkpoint.directory defaults to
    the chief's <run dir>/checkpoints, which the other workers resume from."""
    strategy = node.strategy
    if strategy_of(strategy.kind).single_process or local_worker_count(strategy):
        return run_dir  # one process, or the launcher of local workers (each worker comes back here on its own)
    cluster, _ = find_cluster(strategy, read_tf_config(), read_slurm())
    if cluster is None or cluster.is_chief:
        return run_dir  # a bad spec is refused by the resolver, in this run dir
    with open_dict(node):
        if not str(node.checkpoint.get("directory", "")):
            node.checkpoint.directory = str(run_dir / "checkpoints")
    return run_dir / "workers" / f"worker{cluster.index}"
