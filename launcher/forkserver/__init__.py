"""Warm starts for the processes the launcher starts itself: sweep jobs, local workers, restart attempts.

Each is `python -m launcher <overrides>`, and a new interpreter spends most of its start importing TensorFlow,
Keras and MLflow (~10 CPU-s on a 2-core Xeon). A forkserver imports them once, without starting TensorFlow's
runtime, and forks each child from there; the child then runs `python -m launcher` as the interpreter would
(`runpy` into a fresh `__main__`, its own stdio, the interpreter's exit path). It is a real process: its own pid
(what `OutcomeRecord.pid` and signals use), session or process group as a new interpreter's would be, its own
TensorFlow runtime made after the fork, its exit status as `subprocess` reports it.

A start is cold (a new interpreter, as before) when a fork could differ from one: an environment variable read
while TensorFlow, Keras, the C libraries or Python load changed, `tf_logs=true` (TensorFlow's start-up lines come
from its import), another interpreter, no fork on this platform, or `LAUNCHER_FORKSERVER=off`.

The first warm start of a process starts its server (that start costs what a cold one does), and the server's
socket is passed to every child in `LAUNCHER_FORKSERVER`, so nested starts (a sweep job's restarts) use it too.
When the process that started a server ends, the server takes no new start and ends once the children it forked
have: they run on, as orphans of a cold start would, and one started to die with its parent dies with the process
that asked for it (a job's restart supervisor), never with the server.

Modules:
    alike: which starts a fork makes alike a new interpreter, and which must be cold
    child: in the fork: the server's copy becomes `python -m launcher <args>`, as a new one would
    requester: the requester's side: start a server, ask it for a child, hold it as `Popen` would
    routing: where a start goes: forked by the shared server when alike, else a new interpreter
    server: the forkserver itself: imports what a launch needs once, forks one child per request
    wire: how requester and server talk: length-prefixed JSON and descriptors on a Unix socket

May import: `launcher.console` and `launcher.outcome` only (a leaf: `launch` and `sweep` start their processes
through it), never TensorFlow at import (the sweep process uses it).
"""

from launcher.forkserver.alike import COLD_ARGS, differs_at_import, launcher_args
from launcher.forkserver.requester import ForkedProcess, Refused, Server
from launcher.forkserver.routing import share, start
from launcher.forkserver.wire import SOCKET_ENV, receive, send

__all__ = [
    "COLD_ARGS",
    "SOCKET_ENV",
    "ForkedProcess",
    "Refused",
    "Server",
    "differs_at_import",
    "launcher_args",
    "receive",
    "send",
    "share",
    "start",
]
