"""strategy.slurm_requeue: Slurm's time-limit warning (SIGUSR1) saves a checkpoint and requeues the job; the
requeued job resumes from it. Slurm itself is not here: a fake `scontrol` on PATH records what it was asked, and
the test sends the signals as Slurm does, to every process of the job step.

The requeue itself: `launcher.supervise.slurm`.

The preemption guard and the requeue after the run ends: `launcher.launch.stopping`.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

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


def _under_slurm(tmp_path: Path) -> dict:
    """The environment of a Slurm job step whose `scontrol` records its arguments in `scontrol.calls`."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/scontrol.calls\n')
    (fake / "scontrol").chmod(0o755)
    env = {**os.environ, **SLURM_JOB, "PATH": f"{fake}:{os.environ['PATH']}"}
    env.pop("LAUNCHER_FAULT", None)
    return env


@pytest.mark.slow
def test_the_time_limit_warning_saves_requeues_and_the_requeued_job_resumes(tmp_path):
    env = _under_slurm(tmp_path)
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


def _console(stream) -> queue.Queue:
    """The lines of `stream` as they come (None at its end), read by a thread so a wait for one can end."""
    lines: queue.Queue = queue.Queue()

    def read():
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _read_until(lines: queue.Queue, seen: list[str], text: str, seconds: float = 300) -> bool:
    """Lines into `seen` until one holds `text` (True); False at the end of the output or after `seconds`."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            return False
        if line is None:
            lines.put(None)  # still the end for the next reader
            return False
        seen.append(line)
        if text in line:
            return True
    return False


def _signalled_like_slurm(args: list[str], env: dict, step: int, signum: int, tmp_path: Path):
    """The supervised launch (`train.max_restarts`) paused at global step `step`, then `signum` sent to every process
    of the job step, as Slurm sends `--signal=USR1@N`, scancel's and the time limit's SIGTERM (proctrack signals each
    process of the step: the supervisor and its training child alike), then let go. Its exit code, stdout, stderr."""
    resume, errors = tmp_path / f"resume-{step}", tmp_path / f"stderr-{step}"
    env = {**env, "LAUNCHER_FAULT": f"PAUSE@steps:{step}", "LAUNCHER_FAULT_RESUME": str(resume)}
    with errors.open("w") as stderr:
        supervisor = warm.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
    lines, seen = _console(supervisor.stdout), []
    paused = _read_until(lines, seen, f"paused at steps {step}")
    assert paused, "".join(seen)[-2000:] + errors.read_text()[-3000:]
    training = json.loads((tmp_path / "run" / "launch.lock").read_text())["pid"]  # the child holds the run dir
    assert training != supervisor.pid
    # Slurm signals the step's processes one by one: the child first here, then the supervisor, which passes it on.
    # The second copy is sent once the first was handled (two copies pending at once would merge into one).
    name = signal.Signals(signum).name
    os.kill(training, signum)
    assert _read_until(lines, seen, f"Signal {name}: saving"), "".join(seen)[-2000:] + errors.read_text()[-3000:]
    os.kill(supervisor.pid, signum)
    # The supervisor's copy: a line too (a launch that dies of it, or says nothing, is let go after a minute and
    # fails the assertions).
    _read_until(lines, seen, f"Signal {name} again", seconds=60)
    resume.touch()
    while (line := lines.get()) is not None:
        seen.append(line)
    supervisor.wait()
    return supervisor.returncode, "".join(seen), errors.read_text()


@pytest.mark.slow
def test_the_readme_slurm_job_signalled_in_every_process_saves_once_requeues_once_and_stops(tmp_path):
    """README's `srun python -m launcher ... strategy.slurm_requeue=true train.max_restarts=2`: Slurm signals both the
    supervisor and its training child, and the supervisor passes each signal on. The training acts on each once:
    one stop line, the save at that step, one `scontrol requeue` (for SIGUSR1), exit 128 + signal, no restart. Before,
    the second SIGTERM (the supervisor's copy) raised KeyboardInterrupt: exit 1, nothing saved."""
    env = _under_slurm(tmp_path)
    args = [
        sys.executable,
        "-m",
        "launcher",
        f"hydra.run.dir={tmp_path}/run",
        f"tracking.uri={store(tmp_path / 'mlflow.db')}",
        "name=long-run",
        "strategy.slurm_requeue=true",
        "train.max_restarts=2",
        "train.restart_backoff=0",
        "model.hidden_units=[16]",
        "scaling.batch_size=64",
        "xla=false",
        "train.epochs=2",
    ]
    # --signal=USR1@120: the time-limit warning, at global step 12 of 46.
    code, out, err = _signalled_like_slurm(args, env, 12, signal.SIGUSR1, tmp_path)
    assert code == 128 + signal.SIGUSR1, err[-3000:]
    assert out.count("Signal SIGUSR1: saving at the next step boundary") == 1
    assert out.count("Signal SIGUSR1 again: already stopping") == 1  # received twice, acted on once
    assert "Slurm job 4242 requeued" in out and "Restart" not in err
    assert (tmp_path / "scontrol.calls").read_text().split() == ["requeue", "4242"]
    assert (tmp_path / "run" / "checkpoints" / "ckpt-12.json").exists()

    # The requeued job (the same command) resumes there; at step 30 the time limit (or scancel) sends SIGTERM.
    code, out, err = _signalled_like_slurm(args, env, 30, signal.SIGTERM, tmp_path)
    assert code == 128 + signal.SIGTERM, err[-3000:]
    assert "Resuming at epoch 1, step 12 (global step 12)" in out
    assert out.count("Signal SIGTERM: saving at the next step boundary") == 1
    assert out.count("Signal SIGTERM again: already stopping") == 1
    assert "Restart" not in err and "KeyboardInterrupt" not in err
    assert (tmp_path / "run" / "checkpoints" / "ckpt-30.json").exists()
    assert (tmp_path / "scontrol.calls").read_text().split() == ["requeue", "4242"]  # SIGTERM does not requeue
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    assert [(r.info.status, r.data.tags["slurm.requeue"]) for r in runs] == [("KILLED", "4242")]
