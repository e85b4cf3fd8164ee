"""One process per directory: a launch's run dir, a sweep's dir. A second holder is refused, never both writing.

The lock is an advisory `flock` on a file in the directory (`launch.lock`, `sweep.lock`), which also holds the
owner's pid, host and start time for the refusal message. The kernel drops a `flock` when its process dies (even
by SIGKILL), so a lock left behind by a dead owner is taken over, with a notice naming it. `flock` works across
hosts on NFSv4 and Lustre; on a file system without it, two hosts could both take the lock (README says so).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

LOCK_FILE = "launch.lock"  # a launch's run dir
SWEEP_LOCK_FILE = "sweep.lock"  # a sweep's dir


class Held(Exception):
    """Another live process holds the directory: `owner` is its record (pid, host, since)."""

    def __init__(self, directory: Path, owner: dict):
        super().__init__(f"{directory} is held by {describe(owner)}")
        self.directory, self.owner = directory, owner


class DirLock:
    """Held from before the first write in the directory until its owner ends."""

    def __init__(self, directory: Path, name: str = LOCK_FILE, holder: str = "launch"):
        self.path = Path(directory) / name
        self.holder = holder  # what holds it, for the take-over notice
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
            raise Held(self.path.parent, owner) from None
        previous = _read_owner(handle)
        if previous and previous.get("pid") != os.getpid():
            print(
                f"NOTICE: the {self.holder} that last held {self.path.parent} (pid {previous.get('pid')} on "
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

    def __enter__(self) -> DirLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def describe(owner: dict) -> str:
    """`pid 12 on host h, started 2026-12-07 05:40:00`."""
    since = owner.get("since")
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if since else "unknown time"
    return f"pid {owner.get('pid', '?')} on host {owner.get('host', '?')}, started {started}"


def _read_owner(handle) -> dict:
    handle.seek(0)
    try:
        return json.loads(handle.read() or "{}")
    except ValueError:
        return {}
