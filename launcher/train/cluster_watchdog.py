"""A bound on joining a multi-worker cluster.

TensorFlow's MultiWorkerMirroredStrategy waits without end for a peer that never starts (measured:
worker 0 of two, alone, still waiting after 100 s; a coordination-service register timeout bounds the
other workers but not worker 0), and it holds the GIL while it waits, so no Python thread of this
process can act. A watchdog *process* (this file run as a script: standard library only, no
TensorFlow) waits `timeout` seconds; if the worker has not closed the pipe by then (the cluster did
not form) it tries a TCP connection to every peer, prints which ones do not answer, and kills the
worker (SIGKILL: exit status 137 / -9). Nothing has been written yet at that point (no checkpoint,
no MLflow run), so nothing is lost.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
from contextlib import contextmanager


def peer_states(workers: list[str], index: int, probe_seconds: float = 1.0) -> list[tuple[int, str, str]]:
    """(rank, address, "answers" | why not) for every worker but this one."""
    states = []
    for rank, address in enumerate(workers):
        if rank == index:
            continue
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=probe_seconds):
                states.append((rank, address, "answers"))
        except OSError as err:
            states.append((rank, address, err.strerror or type(err).__name__))
    return states


def unreachable_message(workers: list[str], index: int, timeout: float, states) -> str:
    missing = [f"worker {rank} at {address} ({state})" for rank, address, state in states if state != "answers"]
    joined = ", ".join(missing) if missing else "every peer answers TCP but the cluster did not form"
    return (
        f"\nThe multi-worker cluster did not form within strategy.connect_timeout={timeout:g} s "
        f"(this is worker {index} at {workers[index]}): {joined}.\n"
        "fix: start every worker with the same strategy.workers / TF_CONFIG and its own index, check that "
        "each address is reachable from this machine (host, port, firewall), or raise "
        "strategy.connect_timeout when workers start far apart.\n"
    )


@contextmanager
def joining(workers: list[str], index: int, timeout: float):
    """Run the body (creating the strategy); the process is killed, naming its missing peers, if the body
    has not returned within `timeout` seconds."""
    watchdog = subprocess.Popen(
        [sys.executable, __file__, json.dumps([workers, index, timeout, os.getpid()])], stdin=subprocess.PIPE
    )
    try:
        yield
    finally:
        watchdog.stdin.close()  # the cluster formed (or creating it failed): stand down
        watchdog.wait()


def _watch(workers: list[str], index: int, timeout: float, worker_pid: int) -> None:
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    if ready:  # end of input: the worker closed the pipe, or died
        return
    message = unreachable_message(workers, index, timeout, peer_states(workers, index))
    print(message, file=sys.stderr, flush=True)
    os.kill(worker_pid, signal.SIGKILL)


if __name__ == "__main__":
    _watch(*json.loads(sys.argv[1]))
