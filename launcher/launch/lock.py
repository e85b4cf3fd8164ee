"""One launch per run dir: a second launch on the same dir is refused, never both writing.

The lock is an advisory `flock` on `<run dir>/launch.lock`, which also holds the owner's pid,
host and start time for the refusal message. The kernel drops a `flock` when its process
dies (even by SIGKILL), so a lock left behind by a dead launch is taken over, with a notice
naming the launch that left it. `flock` works across hosts on NFSv4 and Lustre; on a file
system without it, two hosts could both take the lock (README says so).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from launcher.config.errors import ConfigError, Violation

LOCK_FILE = "launch.lock"


class RunDirBusy(ConfigError):
    """Another live launch holds the run dir: refuse without writing anything in it."""


class RunDirLock:
    """Held from before the first write in the run dir until the launch ends."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self._handle = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # "a+": never truncate, the owner's record stays readable until we hold the lock. Held open until release().
        handle = open(self.path, "a+")  # noqa: SIM115
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _read_owner(handle)
            handle.close()
            raise RunDirBusy([_busy(self.path.parent, owner)]) from None
        previous = _read_owner(handle)
        if previous and previous.get("pid") != os.getpid():
            print(
                f"NOTICE: the launch that last held {self.path.parent} (pid {previous.get('pid')} on "
                f"{previous.get('host')}) ended without releasing it; taking over.",
                file=sys.stderr,
                flush=True,
            )
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}))
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        if self._handle is None:
            return
        self._handle.seek(0)
        self._handle.truncate()  # an empty file: released cleanly (a record left behind means the owner died)
        fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
        self._handle.close()
        self._handle = None

    def __enter__(self) -> RunDirLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _read_owner(handle) -> dict:
    handle.seek(0)
    try:
        return json.loads(handle.read() or "{}")
    except ValueError:
        return {}


def _busy(run_dir: Path, owner: dict) -> Violation:
    since = owner.get("since")
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if since else "unknown time"
    who = f"pid {owner.get('pid', '?')} on host {owner.get('host', '?')}, started {started}"
    return Violation(
        key="hydra.run.dir",
        value=str(run_dir),
        expected=f"a run dir no other launch is using (this one is held by {who})",
        fix="wait for that launch to finish (re-running then resumes it), stop it, or give this launch "
        "another name= / hydra.run.dir=",
    )
