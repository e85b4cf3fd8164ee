"""How a local multi-worker job reports a failed worker, with real processes standing in for the workers (no
TensorFlow): the timing the killed-worker run hits only now and then, made to happen every time."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import deque

from launcher.launch.local_workers import Worker, _Job


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
