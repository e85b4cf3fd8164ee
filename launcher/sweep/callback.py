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

from launcher.files import SWEEP_FILE, read_json, write_json_atomic
from launcher.sweep.job import swept_keys


class SweepCallback(Callback):
    """Creates the parent MLflow run before the jobs start and summarises the sweep after."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        state = {"sweep_id": uuid.uuid4().hex[:12], "parent_run_id": None, "uri": None,
                 "swept_keys": swept_keys(list(config.hydra.overrides.task))
                 + list((config.hydra.sweeper.get("params") or {}).keys())}
        if config.tracking.enabled:
            from launcher.tracking.tracker import Tracker
            from launcher.tracking.uri import check_reachable, resolve_uri

            uri = resolve_uri(config.tracking.uri, Path.cwd())
            check_reachable(uri)
            overrides = list(config.hydra.overrides.task)
            parent = Tracker(
                uri, config.tracking.experiment, f"sweep-{state['sweep_id']}", Path.cwd() / "outputs" / "mlartifacts"
            )
            parent.set_tags({"sweep_id": state["sweep_id"], "sweep.overrides": " ".join(overrides),
                             "sweep.dir": str(sweep_dir), "sweep.role": "parent"})
            state.update(parent_run_id=parent.run_id, uri=uri, experiment=config.tracking.experiment)
        write_json_atomic(sweep_dir / SWEEP_FILE, state)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        state = read_json(sweep_dir / SWEEP_FILE, {})
        # The sweep's promise, recorded for whoever checks it: jobs ran elsewhere, TensorFlow never loaded here.
        state.update(sweep_pid=os.getpid(), tensorflow_loaded="tensorflow" in sys.modules)
        write_json_atomic(sweep_dir / SWEEP_FILE, state)
        if not state.get("parent_run_id"):
            return
        from launcher.sweep.summary import summarise

        summarise(state["uri"], state["parent_run_id"], sweep_dir)
