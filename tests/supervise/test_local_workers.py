"""How a local multi-worker job reports a failed worker, with real processes standing in for the workers (no
TensorFlow): the timing the killed-worker run hits only now and then, made to happen every time."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import deque

from launcher.supervise.local_workers import Worker, _Job


class _StandIn(Worker):
    """A worker whose process is `code` and whose output thread's join does `on_join` first."""

    def __init__(self, index: int, code: str, on_join=lambda: None):
        self.index = index
        self.tail = deque([f"worker {index} last line"], maxlen=50)
        self.process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
        self.thread = self  # join() below
        self._on_join = on_join

    def join(self, timeout=None) -> None:
        self._on_join()


def test_a_peer_that_exits_on_its_own_while_the_failed_workers_last_lines_are_read_counts_as_stopped(capsys):
    # The chief ends by itself when its peer is gone (its collective fails): here, when its stdin closes, which
    # happens while the job reads the killed worker's last lines.
    chief = _StandIn(0, "import sys; sys.stdin.read(); sys.exit(1)")

    def chief_exits_meanwhile() -> None:
        chief.process.stdin.close()
        chief.process.wait(timeout=30)

    killed = _StandIn(1, "import time; time.sleep(60)", on_join=chief_exits_meanwhile)
    killed.process.send_signal(signal.SIGKILL)
    killed.process.wait(timeout=30)

    code = _Job([chief, killed]).wait()

    err = capsys.readouterr().err
    assert "Worker 1" in err and "was killed by SIGKILL" in err, err
    assert "was killed by SIGKILL; the other 1 running worker(s) were stopped." in err, err  # running when seen
    assert "already ended" not in err, err
    assert "worker 1 last line" in err
    assert code == 1 and chief.process.returncode == 1


def test_a_peer_that_ended_before_the_failure_was_seen_is_named_as_ended_not_stopped(capsys):
    # The chief's collective with the killed worker failed and it exited, all before the job's next look.
    chief = _StandIn(0, "import sys; sys.exit(1)")
    chief.process.wait(timeout=30)
    killed = _StandIn(1, "import time; time.sleep(60)")
    killed.process.send_signal(signal.SIGKILL)
    killed.process.wait(timeout=30)

    code = _Job([chief, killed]).wait()

    err = capsys.readouterr().err
    assert "Worker 1" in err and "was killed by SIGKILL; worker 0 had already ended: it exited with code 1." in err
    assert "were stopped" not in err, err  # the job stopped nobody
    assert code == 1


# A launcher process watching two stand-in workers that record each SIGUSR1 they get and stop 128 + 10 after it,
# as workers under strategy.slurm_requeue do (they save, the chief requeues).
SLURM_JOB = """
import subprocess, sys
from collections import deque

from launcher.supervise.local_workers import Worker, _Job

WORKER = '''
import signal, sys, time
got = []
signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
print("ready", flush=True)
deadline = time.monotonic() + 30
while not got and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(1.0)  # a copy arriving while it saves is counted too
with open(sys.argv[1], "a") as out:
    out.write(f"{len(got)}\\\\n")
sys.exit(128 + signal.SIGUSR1)
'''


class StandIn(Worker):
    def __init__(self, index, record):
        self.index, self.tail, self.thread = index, deque(maxlen=5), self
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER, record], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.process.stdout.readline()

    def join(self, timeout=None):
        pass


job = _Job([StandIn(0, sys.argv[1]), StandIn(1, sys.argv[1])])
with job.forwarding():
    print("watching", flush=True)
    code = job.wait()
print("job", code, flush=True)
"""


def test_slurms_time_limit_warning_reaches_every_worker_once_and_the_job_ends_as_signalled(tmp_path):
    """Slurm's `--signal=USR1@N` reaches this launcher (and, directly, the workers, which ignore copies): before,
    SIGUSR1's default action ended the launcher, and its workers died with it before they saved."""
    record = tmp_path / "usr1.txt"
    job = subprocess.Popen(
        [sys.executable, "-c", SLURM_JOB, str(record)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert job.stdout.readline().strip() == "watching"
    job.send_signal(signal.SIGUSR1)
    seen = [job.stderr.readline() for _ in range(2)]  # a blank line, then the notice: the first copy is handled
    assert "Signal SIGUSR1: passed to every worker" in seen[-1], seen
    job.send_signal(signal.SIGUSR1)  # another copy (Slurm signals each process of the step): not a second stop
    out, err = job.communicate(timeout=60)
    assert job.returncode == 0, err[-2000:]
    assert out.split() == ["job", str(128 + signal.SIGUSR1)]
    assert record.read_text().split() == ["1", "1"]  # each worker got it once
