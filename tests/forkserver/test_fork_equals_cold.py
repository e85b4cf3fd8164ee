"""A forked launch trains exactly as a new interpreter does: the same weights bit for bit, the same histories.

Almost every launch of the suite is forked (`tests/warm.py`) and a person's own launch is a new interpreter, so
what the suite shows of a forked launch holds for theirs only if the two cannot differ. This run uses TensorFlow's
default thread pools (the suite's other launches run one intra-op thread each), made after the fork.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import warm
from support.config import ROOT, TINY
from support.tracking import store

from launcher import forkserver
from launcher.outcome import FINISHED, OutcomeRecord

# What differs between two runs of one config by how fast they ran, not by what they computed.
TIMINGS = {"epoch_time_sec", "examples_per_sec", "model_flops_utilization", "time_to_first_step_sec"}


def _histories(db) -> dict[str, list[tuple[int, float]]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store(db))
    (run,) = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    keys = sorted(k for k in run.data.metrics if k not in TIMINGS and not k.startswith("system/"))
    return {k: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)] for k in keys}


def _weights(run_dir) -> list[np.ndarray]:
    import keras

    return keras.saving.load_model(run_dir / "model.keras").get_weights()


@pytest.mark.e2e  # a server of its own, imported under TensorFlow's default thread pools
def test_a_forked_launch_trains_bit_for_bit_as_a_new_interpreter_with_default_thread_pools(tmp_path):
    env = {k: v for k, v in warm.baseline().items() if k not in ("TF_NUM_INTRAOP_THREADS", forkserver.SOCKET_ENV)}
    env[forkserver.SOCKET_ENV] = "off"  # neither launch starts children; nothing else is shared
    overrides = [*TINY, "deterministic=true", "seed=3"]

    def args(name: str) -> list[str]:
        run = f"hydra.run.dir={tmp_path / name}"
        return [sys.executable, "-m", "launcher", run, f"tracking.uri={store(tmp_path / f'{name}.db')}", *overrides]

    server = forkserver.Server(env)
    try:
        forked = forkserver.ForkedProcess(server.path, args("forked"), cwd=ROOT, env=env, stdout=subprocess.PIPE)
        cold = subprocess.Popen(args("cold"), cwd=ROOT, env=env, stdout=subprocess.PIPE)
        out_forked, _ = forked.communicate(timeout=600)
        out_cold, _ = cold.communicate(timeout=600)
    finally:
        server.close()
    assert forked.returncode == 0, out_forked[-3000:]
    assert cold.returncode == 0, out_cold[-3000:]
    forked_outcome, cold_outcome = OutcomeRecord.read(tmp_path / "forked"), OutcomeRecord.read(tmp_path / "cold")
    assert forked_outcome.status == cold_outcome.status == FINISHED
    assert forked_outcome.forked_by == server.process.pid and cold_outcome.forked_by is None

    histories = _histories(tmp_path / "forked.db")
    assert {"loss", "val_loss", "step/loss"} <= set(histories)
    assert histories == _histories(tmp_path / "cold.db")
    for mine, theirs in zip(_weights(tmp_path / "forked"), _weights(tmp_path / "cold"), strict=True):
        np.testing.assert_array_equal(mine, theirs)
