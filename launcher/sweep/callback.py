"""The sweep's parent MLflow run: opened before the first job, summarised after the last.

Hydra calls this callback in the sweep process (`hydra.callbacks` in conf/config.yaml).
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from launcher.config.tasks import objective
from launcher.console import quiet_tracking_logs
from launcher.files import SWEEP_FILE, read_json, write_json_atomic
from launcher.sweep import study_storage
from launcher.sweep.job import swept_keys
from launcher.sweep.summary import summarise
from launcher.tracking.client import with_retry
from launcher.tracking.tracker import open_run
from launcher.tracking.uri import check_reachable, resolve_uri


def _swept(config: DictConfig) -> list[str]:
    return swept_keys(list(config.hydra.overrides.task)) + list((config.hydra.sweeper.get("params") or {}).keys())


def _reseed_sampler(config: DictConfig, offset: int) -> None:
    """A seeded search sampler (Optuna's) run again would propose its first run's trials again, which
    the jobs would skip as finished: offset its seed by the earlier runs so a continued study samples
    new points. Hydra builds the sweeper from this same config after this callback."""
    sampler = config.hydra.sweeper.get("sampler")
    if sampler is None or sampler.get("seed") is None:
        return
    from omegaconf import open_dict, read_write

    with read_write(config), open_dict(config):
        sampler.seed = int(sampler.seed) + offset
    print(
        f"  search sampler seed {sampler.seed} (its first run's + {offset}): new trials, not the same again", flush=True
    )


class SweepCallback(Callback):
    """Creates the parent MLflow run before the jobs start and summarises the sweep after."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not config.get("tf_logs", False):
            quiet_tracking_logs()
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        study_storage.prepare(config.hydra.sweeper.get("storage"))
        previous = read_json(sweep_dir / SWEEP_FILE)
        if previous and previous.get("sweep_id"):
            self._continue(config, sweep_dir, previous)
            return
        state = {"sweep_id": uuid.uuid4().hex[:12], "parent_run_id": None, "uri": None, "swept_keys": _swept(config)}
        if config.tracking.enabled:
            uri = resolve_uri(config.tracking.uri, Path.cwd())
            check_reachable(uri)
            overrides = list(config.hydra.overrides.task)
            parent = open_run(uri, Path.cwd(), config.tracking.experiment, f"sweep-{state['sweep_id']}")
            parent.set_tags(
                {
                    "sweep_id": state["sweep_id"],
                    "sweep.overrides": " ".join(overrides),
                    "sweep.dir": str(sweep_dir),
                    "sweep.role": "parent",
                }
            )
            parent.flush()
            state.update(parent_run_id=parent.run_id, uri=uri, experiment=config.tracking.experiment)
        write_json_atomic(sweep_dir / SWEEP_FILE, state)

    def _continue(self, config: DictConfig, sweep_dir: Path, state: dict) -> None:
        """The same sweep dir again (a named sweep re-run): same sweep id and parent run; jobs that
        finished are skipped and killed ones resume (`sweep.job`)."""
        print(
            f"Continuing sweep {state['sweep_id']} in {sweep_dir}: finished jobs are skipped, "
            "interrupted ones resume from their checkpoints.",
            flush=True,
        )
        state["swept_keys"] = sorted(set(state.get("swept_keys") or []) | set(_swept(config)))
        state["runs"] = state.get("runs", 1) + 1
        _reseed_sampler(config, state["runs"] - 1)
        if state.get("parent_run_id"):
            from mlflow.tracking import MlflowClient

            check_reachable(state["uri"])
            with_retry(MlflowClient(state["uri"]).update_run, state["parent_run_id"], status="RUNNING")
        state.pop("sweep_pid", None)
        write_json_atomic(sweep_dir / SWEEP_FILE, state)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        state = read_json(sweep_dir / SWEEP_FILE, {})
        # The sweep's promise, recorded for whoever checks it: jobs ran elsewhere, TensorFlow never loaded here.
        state.update(sweep_pid=os.getpid(), tensorflow_loaded="tensorflow" in sys.modules)
        write_json_atomic(sweep_dir / SWEEP_FILE, state)
        if not state.get("parent_run_id"):
            return

        summarise(
            state["uri"],
            state["parent_run_id"],
            sweep_dir,
            state.get("swept_keys") or [],
            objective(config),
            config.hydra.sweeper.get("direction"),
        )
