"""strategy.slurm_requeue: Slurm's time-limit warning (SIGUSR1) saves a checkpoint and requeues the job; the
requeued job resumes from it. Slurm itself is not here: a fake `scontrol` on PATH records what it was asked.

The requeue itself: `launcher.launch.slurm`.

The preemption guard and the requeue after the run ends: `launcher.launch.stopping`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

import pytest
import warm
from fakes import CPU_PLAIN
from support.config import ROOT, config
from support.tracking import store

from launcher.plan.resolve import resolve_all

SLURM_JOB = {"SLURM_JOB_ID": "4242"}


def test_the_plan_says_what_sigusr1_will_do_under_slurm():
    plan, problems = resolve_all(
        config("strategy.slurm_requeue=true", "name=long"), replace(CPU_PLAIN, slurm=SLURM_JOB)
    )
    assert not problems
    assert plan.strategy.requeues and plan.strategy.slurm_requeue == "SIGUSR1: save, then scontrol requeue 4242"
    assert "--signal=USR1" in plan.strategy.reason("slurm_requeue")
    assert not any("slurm_requeue" in w for w in plan.warnings)


def test_outside_slurm_or_without_a_name_the_plan_warns():
    plan, _ = resolve_all(config("strategy.slurm_requeue=true", "name=long"), CPU_PLAIN)
    assert not plan.strategy.requeues and plan.strategy.slurm_requeue == "off"
    assert any("outside a Slurm job" in w for w in plan.warnings)
    plan, _ = resolve_all(config("strategy.slurm_requeue=true"), replace(CPU_PLAIN, slurm=SLURM_JOB))
    assert plan.strategy.requeues and any("without name=" in w for w in plan.warnings)
    plan, _ = resolve_all(config(), replace(CPU_PLAIN, slurm=SLURM_JOB))
    assert plan.strategy.slurm_requeue is None and not plan.strategy.requeues  # off unless asked


@pytest.mark.slow
def test_the_time_limit_warning_saves_requeues_and_the_requeued_job_resumes(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/scontrol.calls\n')
    (fake / "scontrol").chmod(0o755)
    env = {**os.environ, **SLURM_JOB, "PATH": f"{fake}:{os.environ['PATH']}"}
    env.pop("LAUNCHER_FAULT", None)
    args = [
        sys.executable,
        "-m",
        "launcher",
        f"hydra.run.dir={tmp_path}/run",
        f"tracking.uri={store(tmp_path / 'mlflow.db')}",
        "strategy.slurm_requeue=true",
        "name=long",
        "model.hidden_units=[16]",
        "scaling.batch_size=64",
        "xla=false",
        "train.epochs=2",
    ]
    # The warning at global step 12 of 23 in epoch 1 (digits, batch 64, ragged last batch kept).
    warned = warm.run(args, cwd=ROOT, timeout=600, env={**env, "LAUNCHER_FAULT": "USR1@steps:12"})
    assert warned.returncode == 128 + 10, warned.stderr[-2000:]
    assert "Slurm job 4242 requeued" in warned.stdout
    assert (tmp_path / "scontrol.calls").read_text().split() == ["requeue", "4242"]
    assert (tmp_path / "run" / "checkpoints" / "ckpt-12.json").exists()

    requeued = warm.run(args, cwd=ROOT, timeout=600, env=env)
    assert requeued.returncode == 0, requeued.stderr[-2000:]
    assert "Resuming at epoch 1, step 12 (global step 12)" in requeued.stdout
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    assert [(r.info.status, r.data.tags["slurm.requeue"]) for r in runs] == [("FINISHED", "4242")]
    assert (tmp_path / "scontrol.calls").read_text().split() == ["requeue", "4242"]  # not again at the end
