"""MultiWorkerMirroredStrategy: two local worker processes on 127.0.0.1 train in lockstep."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, TINY, free_ports


@pytest.mark.slow
def test_two_workers_train_in_lockstep_and_only_the_chief_tracks(tmp_path):
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    procs = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = {**os.environ, "TF_CONFIG": json.dumps(tf_config)}
        args = [
            sys.executable, "-m", "launcher", *TINY, "strategy=multi_worker", "precision=mixed", "xla=true",
            "train.profile.steps=4", "train.profile.skip_steps=4",
            f"hydra.run.dir={tmp_path}/worker{index}", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        ]
        procs.append(
            subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-3000:]
    finals = [[line for line in out.splitlines() if line.strip().startswith("loss ")][-1] for out, _ in outputs]
    # Losses are reduced across both workers: the two processes report the same number.
    assert finals[0] == finals[1]
    chief_out = outputs[0][0]
    assert re.search(r"replicas\s+2\s+2 worker\(s\) x 1 device\(s\)", chief_out)
    assert re.search(r"loss_scale.optimizer\s+replica_safe", chief_out)
    assert re.search(r"process.is_chief\s+False", outputs[1][0])
    # Only the chief traces the profile window.
    assert (tmp_path / "worker0" / "profile" / "top_ops.txt").exists()
    assert not (tmp_path / "worker1" / "profile").exists()

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].data.tags["plan.strategy"] == "multi_worker"
    assert (tmp_path / "worker0" / "model.keras").exists()
    assert not (tmp_path / "worker1" / "model.keras").exists()
