"""Two launches on one run dir: the second is refused and writes nothing; a dead owner's lock is taken over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from support.config import TINY
from support.tracking import runs_in

from launcher.dirlock import SWEEP_LOCK_FILE, DirLock, Held
from launcher.launch.lock import LOCK_FILE, RunDirBusy, RunDirLock


def test_a_second_holder_is_refused_with_the_owner_named(tmp_path):
    with RunDirLock(tmp_path), pytest.raises(RunDirBusy) as refused:
        RunDirLock(tmp_path).acquire()
    message = str(refused.value)
    assert "hydra.run.dir" in message and str(tmp_path) in message
    assert f"pid {os.getpid()}" in message and "fix:" in message
    # Released cleanly: the next launch takes it without a notice.
    RunDirLock(tmp_path).acquire()


def test_a_sweep_dir_is_held_by_one_sweeper_beside_its_jobs_run_dirs(tmp_path):
    """The sweep's lock is a file of its own: a job's launch lock in a sub-dir, or the sweep dir as a run dir,
    is another lock."""
    with DirLock(tmp_path, SWEEP_LOCK_FILE, "sweep"), pytest.raises(Held) as refused:
        DirLock(tmp_path, SWEEP_LOCK_FILE, "sweep").acquire()
    assert refused.value.owner["pid"] == os.getpid() and refused.value.directory == tmp_path
    with DirLock(tmp_path, SWEEP_LOCK_FILE, "sweep"), RunDirLock(tmp_path / "0"), RunDirLock(tmp_path):
        pass


def test_a_lock_left_by_a_killed_launch_is_taken_over(tmp_path, capfd):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from launcher.launch.lock import RunDirLock; "
            f"lock = RunDirLock({str(tmp_path)!r}); lock.acquire(); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(RunDirBusy):
        RunDirLock(tmp_path).acquire()  # alive: refused
    dead_pid = holder.pid
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == dead_pid  # the record is left behind
    lock = RunDirLock(tmp_path)
    lock.acquire()
    assert f"pid {dead_pid}" in capfd.readouterr().err
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock.release()


def test_the_cli_refuses_a_run_dir_in_use_and_writes_nothing_there(cli, cli_here, tmp_path):
    run_dir = tmp_path / "run"
    with RunDirLock(run_dir):  # a live launch holding the dir
        done = cli(*TINY)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "no other launch is using" in done.stderr and f"pid {os.getpid()}" in done.stderr
    assert "Traceback" not in done.stderr
    written = {p.name for p in run_dir.iterdir()} - {LOCK_FILE, ".hydra", "__main__.log"}
    assert written == set(), written  # no outcome.json, plan.yaml, config.yaml or checkpoints
    assert not runs_in(tmp_path / "mlflow.db")
    # Once the holder is gone, the same command trains (through the same entry, in this process).
    assert cli_here(*TINY).returncode == 0
