"""checkpoint.directory=s3://...: checkpoints off the box, on a real S3-compatible server (moto) on 127.0.0.1.

The mirror's rules first, on files (no TensorFlow): a checkpoint is complete remotely only with its sidecar,
uploaded last; keep-N prunes remotely; resume=never moves the remote checkpoints aside. Then a real run killed
mid-upload, its run dir deleted (a new machine), resumed from the store to the same weights, logging to a real
MLflow server whose artifacts go to the same store."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import warm
from support.config import ROOT
from support.tracking import MlflowServer

from launcher.config.errors import ConfigError
from launcher.launch.remote import RemoteCheckpoints


def _fake_checkpoint(local: Path, step: int, sidecar: bool = True) -> str:
    local.mkdir(parents=True, exist_ok=True)
    for suffix in (".index", ".data-00000-of-00001"):
        (local / f"ckpt-{step}{suffix}").write_bytes(b"x" * step)
    if sidecar:
        (local / f"ckpt-{step}.json").write_text(json.dumps({"position": {"global_step": step}}))
    return str(local / f"ckpt-{step}")


def test_only_checkpoints_whose_sidecar_arrived_count_and_keep_n_prunes_remotely(s3_server, tmp_path):
    remote = RemoteCheckpoints("s3://ckpts/run")
    remote.check_writable()
    local = tmp_path / "here"
    for step in (10, 20):
        path = _fake_checkpoint(local, step)
        remote.push_checkpoint(path, [str(local / f"ckpt-{s}") for s in (10, 20) if s <= step])
    # ckpt-30's files arrive, its sidecar does not (the upload was cut short): it does not count.
    _fake_checkpoint(local, 30, sidecar=False)
    for suffix in (".index", ".data-00000-of-00001"):
        remote.push_file(local / f"ckpt-30{suffix}")
    assert remote.complete_steps() == [10, 20]
    fresh = tmp_path / "new-machine"
    assert remote.pull(fresh) == [10, 20]
    assert (fresh / "ckpt-20.data-00000-of-00001").read_bytes() == b"x" * 20
    assert not (fresh / "ckpt-30.index").exists()
    assert 'model_checkpoint_path: "ckpt-20"' in (fresh / "checkpoint").read_text()
    assert remote.pull(fresh) == []  # nothing newer remotely
    path = _fake_checkpoint(local, 40)
    remote.push_checkpoint(path, [str(local / "ckpt-20"), path])  # keep 2: ckpt-10 goes remotely too
    assert remote.complete_steps() == [20, 40]


def test_resume_never_moves_remote_checkpoints_aside_and_an_unwritable_store_is_refused(s3_server, tmp_path):
    remote = RemoteCheckpoints("s3://ckpts/run")
    remote.push_checkpoint(_fake_checkpoint(tmp_path, 5), [str(tmp_path / "ckpt-5")])
    assert remote.set_aside() == "ckpts/run.replaced"
    assert remote.complete_steps() == [] and RemoteCheckpoints("s3://ckpts/run.replaced").complete_steps() == [5]
    with pytest.raises(ConfigError) as refused:
        RemoteCheckpoints("s3://no-such-bucket/run").check_writable()
    violation = refused.value.violations[0]
    assert violation.key == "checkpoint.directory" and violation.value == "s3://no-such-bucket/run"
    assert "NoSuchBucket" in violation.expected or "does not exist" in violation.expected


# digits at batch 64: 23 steps per epoch (xla=false keeps the ragged last batch); saves at epoch ends.
EXACT = [
    "model.hidden_units=[16]",
    "scaling.batch_size=64",
    "xla=false",
    "train.epochs=3",
    "deterministic=true",
    "precision=fp32",
    "checkpoint.max_to_keep=2",
]


def _final_weights(run_dir: Path) -> list[np.ndarray]:
    import keras

    return keras.saving.load_model(run_dir / "model.keras").get_weights()


@pytest.mark.slow
def test_a_run_resumes_on_an_empty_disk_from_the_store_never_from_a_half_uploaded_checkpoint(
    s3_server, tmp_path, launcher_here
):
    server = MlflowServer(tmp_path)
    server.artifacts = "s3://ckpts/mlflow"  # the server's usual setting: artifacts proxied to the same store
    server.start()
    try:
        run_dir = tmp_path / "run"
        args = [sys.executable, "-m", "launcher", f"hydra.run.dir={run_dir}", f"tracking.uri={server.url}", *EXACT]
        remote_args = [*args, "checkpoint.directory=s3://ckpts/runs/one"]
        # Killed with ckpt-46's TensorFlow files in the store and its sidecar not yet.
        killed = warm.run(
            remote_args, cwd=ROOT, timeout=600, env={**os.environ, "LAUNCHER_FAULT": "KILL@before_remote_sidecar:46"}
        )
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        remote = RemoteCheckpoints("s3://ckpts/runs/one")
        assert remote.complete_steps() == [23]
        assert remote.fs.exists("ckpts/runs/one/ckpt-46.index")  # half-uploaded
        shutil.rmtree(run_dir)  # a new machine: nothing on the local disk

        resumed = launcher_here(remote_args[3:], ROOT)  # the same command on the "new machine", in this process
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert "downloaded ckpt-23" in resumed.stdout
        assert "Resuming at epoch 2, step 0 (global step 23)" in resumed.stdout
        assert remote.complete_steps() == [46, 69]  # keep 2, remotely too
        assert remote.fs.exists("ckpts/runs/one/model.keras")

        reference = launcher_here([f"hydra.run.dir={tmp_path / 'reference'}", *args[4:]], ROOT)
        assert reference.returncode == 0, reference.stderr[-3000:]
        for mine, theirs in zip(_final_weights(run_dir), _final_weights(tmp_path / "reference"), strict=True):
            np.testing.assert_array_equal(mine, theirs)

        from mlflow.tracking import MlflowClient

        client = MlflowClient(server.url)
        runs = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
        resumed_run = next(r for r in runs if r.data.params.get("checkpoint.directory") == "s3://ckpts/runs/one")
        assert resumed_run.info.status == "FINISHED" and len(runs) == 2  # the resumed run and the reference
        assert [m.step for m in client.get_metric_history(resumed_run.info.run_id, "val_loss")] == [0, 1, 2]
        # Its artifacts went through the server to the store, where the checkpoints are.
        stored = remote.fs.find("ckpts/mlflow")
        assert any(p.endswith("/artifacts/model/model.keras") and resumed_run.info.run_id in p for p in stored)
        secret = os.environ["AWS_SECRET_ACCESS_KEY"]
        shown = [json.dumps(resumed_run.data.params), json.dumps(resumed_run.data.tags), resumed.stdout]
        shown += [resumed.stderr, killed.stdout, killed.stderr]
        shown += [path.read_text() for path in run_dir.rglob("*") if path.suffix in (".yaml", ".log", ".json")]
        assert not any(secret in text for text in shown)
    finally:
        server.stop()
