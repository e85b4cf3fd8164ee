"""checkpoint.directory=s3://... or gs://...: checkpoints off the box, on a real S3-compatible server (moto) and a
GCS emulator (gcp-storage-emulator), both on 127.0.0.1.

The mirror's rules first, on files (no TensorFlow), in both stores: a checkpoint is complete remotely only with its
sidecar, uploaded last; keep-N prunes remotely; resume=never moves the remote checkpoints aside. Then a real run
killed mid-upload, its run dir deleted (a new machine), resumed from the store to the same weights, logging to a real
MLflow server whose artifacts go to the same store; the same from gs://; and two local workers, one killed."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import warm
from support.config import ROOT, TINY
from support.tracking import MlflowServer, free_port, store

from launcher.config.errors import ConfigError
from launcher.launch.remote import RemoteCheckpoints


def _fake_checkpoint(local: Path, step: int, sidecar: bool = True) -> str:
    local.mkdir(parents=True, exist_ok=True)
    for suffix in (".index", ".data-00000-of-00001"):
        (local / f"ckpt-{step}{suffix}").write_bytes(b"x" * step)
    if sidecar:
        (local / f"ckpt-{step}.json").write_text(json.dumps({"position": {"global_step": step}}))
    return str(local / f"ckpt-{step}")


@pytest.fixture
def gcs_server(monkeypatch):
    """A GCS emulator (gcp-storage-emulator) on 127.0.0.1 with an empty bucket `ckpts`; gcsfs, in this process and
    the launches it starts, reaches it through STORAGE_EMULATOR_HOST, anonymously (never the person's credentials)."""
    from gcp_storage_emulator.server import create_server

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="ckpts")
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    # gcsfs otherwise asks each bucket's type over gRPC (storage control), which the emulator does not serve: a
    # minute's timeout per bucket. Read when gcsfs is imported, which no other test does.
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    yield
    server.stop()


@pytest.fixture(params=["s3", "gs"])
def bucket(request) -> str:
    """`<protocol>://ckpts` on a fresh local server of that store."""
    request.getfixturevalue({"s3": "s3_server", "gs": "gcs_server"}[request.param])
    return f"{request.param}://ckpts"


def test_only_checkpoints_whose_sidecar_arrived_count_and_keep_n_prunes_remotely(bucket, tmp_path):
    remote = RemoteCheckpoints(f"{bucket}/run")
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


def test_resume_never_moves_remote_checkpoints_aside_and_an_unwritable_store_is_refused(bucket, tmp_path):
    remote = RemoteCheckpoints(f"{bucket}/run")
    remote.push_checkpoint(_fake_checkpoint(tmp_path, 5), [str(tmp_path / "ckpt-5")])
    assert remote.set_aside() == "ckpts/run.replaced"
    assert remote.complete_steps() == [] and RemoteCheckpoints(f"{bucket}/run.replaced").complete_steps() == [5]
    missing = bucket.replace("ckpts", "no-such-bucket")
    with pytest.raises(ConfigError) as refused:
        RemoteCheckpoints(f"{missing}/run").check_writable()
    violation = refused.value.violations[0]
    assert violation.key == "checkpoint.directory" and violation.value == f"{missing}/run"
    assert "an object store location this process can write" in violation.expected


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


def _mlflow_runs(db: Path) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    return client.search_runs([client.get_experiment_by_name("launcher").experiment_id])


@pytest.mark.slow
def test_a_run_checkpoints_to_gcs_keeps_n_there_and_resumes_from_it_on_an_empty_disk(
    gcs_server, tmp_path, launcher_here
):
    """gs:// as s3://: killed at step 30 (ckpt-23 in the store), the run dir deleted, the same command downloads
    ckpt-23, resumes there into the same MLflow run and keeps the newest two checkpoints in the store."""
    run_dir, db = tmp_path / "run", tmp_path / "mlflow.db"
    url = "gs://ckpts/runs/one"
    args = [*("-m", "launcher"), f"hydra.run.dir={run_dir}", f"tracking.uri={store(db)}", *EXACT]
    args.append(f"checkpoint.directory={url}")
    fault = {**os.environ, "LAUNCHER_FAULT": "KILL@steps:30"}
    killed = warm.run([sys.executable, *args], cwd=ROOT, timeout=600, env=fault)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    remote = RemoteCheckpoints(url)
    assert remote.complete_steps() == [23]
    shutil.rmtree(run_dir)  # a new machine: nothing on the local disk

    resumed = launcher_here(args[2:], ROOT)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "downloaded ckpt-23" in resumed.stdout
    assert "Resuming at epoch 2, step 0 (global step 23)" in resumed.stdout
    assert remote.complete_steps() == [46, 69]  # keep 2, in the store too
    assert remote.fs.exists("ckpts/runs/one/model.keras")
    assert [r.info.status for r in _mlflow_runs(db)] == ["FINISHED"]


def _wait_for(log: Path, pattern: str, job, seconds: float = 300) -> re.Match:
    deadline = time.monotonic() + seconds
    while not (found := re.search(pattern, log.read_text() if log.exists() else "")):
        assert job.poll() is None and time.monotonic() < deadline, f"{pattern!r} not in {log}"
        time.sleep(0.2)
    return found


@pytest.mark.slow
def test_two_local_workers_checkpoint_to_s3_one_is_killed_and_the_job_resumes_from_the_store_into_one_run(
    s3_server, tmp_path
):
    """strategy.local_workers=2 with checkpoint.directory=s3://: the chief uploads; worker 1 SIGKILLed mid-training
    stops the job; on an empty disk (a new machine) the same command has both workers resume from the store's
    checkpoint, at the same step, and finish in the chief's one MLflow run."""
    job, db, log, err = tmp_path / "job", tmp_path / "mlflow.db", tmp_path / "job.out", tmp_path / "job.err"
    url = "s3://ckpts/runs/workers"
    args = [sys.executable, "-m", "launcher", *TINY, "tracking.system_metrics=false", "strategy=multi_worker"]
    args += ["strategy.local_workers=2", "xla=false", "checkpoint.interval_steps=10", f"checkpoint.directory={url}"]
    args += [f"hydra.run.dir={job}", f"tracking.uri={store(db)}"]
    resume = tmp_path / "resume"
    env = {**os.environ, "LAUNCHER_FAULT": "PAUSE@steps:25", "LAUNCHER_FAULT_RESUME": str(resume)}
    with log.open("w") as out, err.open("w") as errors:
        running = warm.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=errors, text=True)
        _wait_for(log, r"\[worker 1\].*paused at steps 25", running)
        remote = RemoteCheckpoints(url)
        assert remote.complete_steps() == [10, 20, 22]  # uploaded by the chief (22: the end of epoch 1)
        pgrep = subprocess.run(["pgrep", "-f", f"strategy.task_index=1 hydra.run.dir={job} "], capture_output=True)
        (worker1,) = [int(pid) for pid in pgrep.stdout.split()]
        os.kill(worker1, signal.SIGKILL)
        resume.touch()
        running.wait()
    assert running.returncode != 0
    assert f"Worker 1 (pid {worker1}) was killed by SIGKILL" in err.read_text(), err.read_text()[-2000:]
    shutil.rmtree(job)  # a new machine: nothing on the local disk

    done = warm.run(args, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"\[worker 0\] Resuming at .*\(global step 22\)", done.stdout), done.stdout[-3000:]
    assert re.search(r"\[worker 1\] Resuming at .*\(global step 22\)", done.stdout), done.stdout[-3000:]
    (run,) = _mlflow_runs(db)  # the chief's run, found again through the store's sidecar
    assert run.info.status == "FINISHED"
    assert remote.complete_steps() == [30, 40, 44]  # keep 3, in the store too
    assert remote.fs.exists("ckpts/runs/workers/model.keras")
    chief, other = (json.loads((d / "outcome.json").read_text()) for d in (job, job / "workers" / "worker1"))
    assert chief["weights_sha256"] == other["weights_sha256"]
