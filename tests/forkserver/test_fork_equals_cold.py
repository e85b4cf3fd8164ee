"""A forked launch trains exactly as a new interpreter does: the same weights bit for bit, the same histories, the
same threads in its BLAS and OpenMP libraries; and the server's lifecycle once it is idle.

Almost every launch of the suite is forked (`tests/warm.py`) and a person's own is a new interpreter, so what the
suite shows of a forked launch holds for theirs only if the two cannot differ. This run uses TensorFlow's default
thread pools (the suite's other launches run one intra-op thread each), made after the fork, from a server started
as a joblib worker's is (under OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1) for launches without those limits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import warm
from support.config import TINY
from support.threads import PROBE, loaded_anew
from support.tracking import store

from launcher import forkserver
from launcher.forkserver.alike import THREAD_LIMIT_VARIABLES
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


@pytest.mark.e2e  # a server of its own, imported under a thread limit its launches do not have
def test_a_forked_launch_trains_bit_for_bit_as_a_new_interpreter_with_default_thread_pools(tmp_path):
    """One deterministic launch forked and one cold, with no thread limit, TensorFlow's default thread pools: the
    same outcome, every metric's history and the final weights bit for bit.

    Their server was started as a joblib worker's is, under OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1: the fork's
    BLAS and OpenMP libraries run their defaults as the cold launch's do and as the same library files loaded anew
    (before, the server's libraries loaded under its limit and a child without one kept it). Once both ended, the
    idle server its owner closes ends within the close, so its exit and CPU reach its owner as a child's do (not an
    orphan left for init to reap)."""
    unlimited = {
        k: v
        for k, v in warm.baseline().items()
        if k not in ("TF_NUM_INTRAOP_THREADS", forkserver.SOCKET_ENV, *THREAD_LIMIT_VARIABLES)
    }
    env = {**unlimited, forkserver.SOCKET_ENV: "off"}  # neither launch starts children; nothing else is shared
    (tmp_path / "probe.py").write_text(PROBE)
    overrides = [*TINY, "deterministic=true", "seed=3", "+hydra.callbacks.probe._target_=probe.Probe"]

    def args(name: str) -> list[str]:
        run = f"hydra.run.dir={tmp_path / name}"
        return [sys.executable, "-m", "launcher", run, f"tracking.uri={store(tmp_path / f'{name}.db')}", *overrides]

    server = forkserver.Server({**unlimited, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    try:
        forked = forkserver.ForkedProcess(
            server.path,
            args("forked"),
            cwd=tmp_path,
            env={**env, "PROBE_OUT": str(tmp_path / "forked.json")},
            stdout=subprocess.PIPE,
        )
        cold = subprocess.Popen(
            args("cold"), cwd=tmp_path, env={**env, "PROBE_OUT": str(tmp_path / "cold.json")}, stdout=subprocess.PIPE
        )
        out_forked, _ = forked.communicate(timeout=600)
        out_cold, _ = cold.communicate(timeout=600)
    finally:
        server.close()
    assert server.process.returncode == 0
    assert not os.path.exists(server.path)
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

    threads = json.loads((tmp_path / "forked.json").read_text())
    assert threads, "no BLAS or OpenMP library loaded"
    assert threads == json.loads((tmp_path / "cold.json").read_text())
    assert threads == loaded_anew(threads, unlimited)
    if len(os.sched_getaffinity(0)) >= 2:  # one CPU: a default of one thread, as the limit
        assert max(threads.values()) > 1
