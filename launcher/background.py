"""Threads the launcher starts beside its work, ended before the process is.

A daemon thread still inside TensorFlow's C++ when the interpreter finalizes is torn down by glibc's forced unwind,
which TensorFlow's native frames do not let through: the process aborts after its work is done (`terminate called
after throwing an instance of ...`, `FATAL: exception not rethrown`, exit 134), and every supervisor reads a finished
run as crashed. So every thread the launcher starts goes through `start`, and `settle` (called by the entry point
before it returns) waits for them and collects, on the calling thread, the garbage they could otherwise finalize
during shutdown. A leaf: no launcher imports, no TensorFlow.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable

SETTLE_SECONDS = 60.0  # an iterator drop takes up to ~1.5 s; a minute means something hangs
_started: set[threading.Thread] = set()
_guard = threading.Lock()


def start(target: Callable[[], object], name: str) -> threading.Thread:
    """Run `target` on a thread of its own that `settle` waits for. Daemon only so that a hung one cannot keep
    the process alive forever: `settle` is what ends it in time."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    with _guard:  # started under the lock: a thread another call prunes has ended, never one not started yet
        _started.difference_update([t for t in _started if not t.is_alive()])
        _started.add(thread)
        thread.start()
    return thread


def running() -> list[threading.Thread]:
    """The threads started here that have not ended."""
    with _guard:
        return [t for t in _started if t.is_alive()]


def settle(timeout: float = SETTLE_SECONDS) -> list[str]:
    """Wait up to `timeout` s for every thread started here to end, then collect garbage on this thread (a TensorFlow
    object left in a reference cycle is finalized here, not by a daemon thread during shutdown). Returns the names of
    the threads still running (empty when all ended)."""
    for thread in running():
        thread.join(timeout)
    gc.collect()
    return [t.name for t in running()]
