"""The forkserver itself: a new interpreter that imports what a launch needs once, then forks one per request.

It preloads without starting TensorFlow's runtime, does ahead the work every launch would repeat (`PREPARE`),
freezes its heap, and serves a Unix socket: it refuses a start that would not be alike, forks the others
(`child.become_launcher`), reports each child's pid and exit status, kills a child told to die with its
requester when that requester goes, and ends after its owner once the children it forked have.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import pkgutil
import select
import shutil
import signal
import socket
import sys

import launcher
from launcher.console import quiet_tensorflow_logs
from launcher.forkserver.alike import differs_at_import
from launcher.forkserver.child import become_launcher
from launcher.forkserver.wire import receive, send

# What a launch imports before it trains (measured with -X importtime), beyond the launcher's own modules.
PRELOAD = (
    "keras",
    "mlflow.tracking",
    "mlflow.store.tracking.sqlalchemy_store",
    "mlflow.keras",
    "mlflow.pyfunc",
    "mlflow.system_metrics.system_metrics_monitor",
    "git",
    "sklearn.datasets",
    "hydra_plugins.launcher_search",
)
# Work each launch would repeat in its own process that needs no TensorFlow runtime, done once in the server
# (module:function, named by the component that knows it): AutoGraph's rewrite of the training and evaluation
# loops, MLflow's index of installed packages, the config schemas in Hydra's store (benchmarks/fork_prepare.py).
# `serve` then freezes the heap it forks from (`freeze_heap`).
PREPARE = (
    "launcher.train.steps:convert_chunk_loops",
    "launcher.launch.mlflow_record:index_installed_packages",
    "launcher.config.schema:store_schemas",
)


def preload() -> None:
    """What a launch imports before it trains, and the work it would repeat that `PREPARE` names. Nothing here
    starts TensorFlow's runtime (no op, no device list): each child makes its own after the fork."""
    quiet_tensorflow_logs(False)  # what a launch without tf_logs=true does before it imports TensorFlow
    for module in pkgutil.walk_packages(launcher.__path__, "launcher."):
        if module.name != "launcher.__main__":  # run as __main__ by each child, as `python -m` does
            importlib.import_module(module.name)
    for name in PRELOAD:
        importlib.import_module(name)
    for target in PREPARE:
        module, function = target.split(":")
        getattr(importlib.import_module(module), function)()


def freeze_heap() -> None:
    """Move what the server holds (its imports: ~600k objects) out of the garbage collector's reach, once, before
    it forks. A forked launch's full collections then walk only the objects it made itself (one over the imported
    heap costs ~0.45 CPU-s) and no longer write to the shared pages, which each child would copy (Python's
    documented `gc.freeze` before `fork`)."""
    gc.collect()
    gc.freeze()


def _refusal(request: dict, imported_under: dict) -> str | None:
    """Why this request must start cold, or None."""
    if request.get("executable") != sys.executable:
        return f"another interpreter ({request.get('executable')})"
    if key := differs_at_import(request["env"], imported_under):
        return f"{key} differs from the server's"
    if not request["new_session"] and os.getsid(0) != request["session"]:
        return "another session (its process group cannot be joined)"
    return None


class _Served:
    """The server's state: its children by pid, the connection each reports to, the CPU of those it reaped."""

    def __init__(self):
        self.running: dict[int, tuple[socket.socket, bool]] = {}
        self.reaped_cpu = 0.0
        self.closing = False  # its owner asked it to take no new start (`Server.close`)

    def reap(self) -> None:
        while self.running:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
            if pid == 0:
                return
            sock, _ = self.running.pop(pid, (None, False))
            cpu = usage.ru_utime + usage.ru_stime
            self.reaped_cpu += cpu
            if sock is not None:
                with contextlib.suppress(OSError):  # the requester stopped waiting
                    send(sock, {"returncode": os.waitstatus_to_exitcode(status), "cpu": cpu})
                sock.close()

    def connections(self) -> list[socket.socket]:
        """The requesters still waiting for a running child: a close on one is that requester's end."""
        return [sock for sock, _ in self.running.values() if sock is not None]

    def requester_gone(self, sock: socket.socket) -> None:
        """A requester's connection closed before its child ended: a child told to die with its parent dies."""
        for pid, (held, dies) in list(self.running.items()):
            if held is sock:
                if dies:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                self.running[pid] = (None, dies)
        sock.close()


def serve(path: str, owner: int) -> None:
    """Fork a launcher per request; report each one's pid and exit. When the process that started it ends, it
    takes no new request and ends once the children it forked have: a child started to die with its parent
    dies with its requester, never with the server (a sweep killed alone leaves its jobs' restarts running)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):  # the group's signals are the
        signal.signal(sig, signal.SIG_IGN)  # children's; this server ends after its owner
    imported_under = dict(os.environ)
    preload()
    freeze_heap()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)  # nobody reads this pipe after "ready"
    served = _Served()
    waiting: list[socket.socket] = []
    while (os.getppid() == owner and not served.closing) or served.running:
        if (os.getppid() != owner or served.closing) and listener.fileno() >= 0:  # no new start: drain
            listener.close()
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
            for sock in waiting:
                sock.close()
            waiting.clear()
        accepting = [listener] if listener.fileno() >= 0 else []
        readable, _, _ = select.select([*accepting, *waiting, *served.connections()], [], [], 0.05)
        for sock in readable:
            if sock is listener:
                waiting.append(listener.accept()[0])
            elif sock in waiting:
                waiting.remove(sock)
                _answer(sock, served, imported_under, listener, waiting)
            else:  # a running child's requester closed its end
                served.requester_gone(sock)
        served.reap()
    # Nothing left to write or flush: the interpreter's teardown of TensorFlow and MLflow would only hold its
    # owner's exit (which waits for it in `Server.close`) ~2 s.
    os._exit(0)


def _answer(sock, served: _Served, imported_under: dict, listener, waiting: list) -> None:
    request, fds = receive(sock, 3)
    if request is None:
        sock.close()
        return
    if request.get("op") == "cpu":  # the CPU of the children reaped so far (the test suite's accounting)
        send(sock, {"cpu": served.reaped_cpu})
        sock.close()
        return
    if request.get("op") == "close" and request.get("owner") == os.getppid():  # its owner is ending
        served.closing = True
        sock.close()
        return
    if request.get("op") == "hello":  # what `share` checks before it relies on this server
        send(sock, {"session": os.getsid(0), "executable": sys.executable})
        sock.close()
        return
    if why := _refusal(request, imported_under):
        for fd in fds:
            os.close(fd)
        send(sock, {"refused": why})
        sock.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    started, set_up = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(started)
        held = [listener, sock, *waiting, *served.connections()]
        become_launcher(request, imported_under, fds, sorted({s.fileno() for s in held}), set_up)
    os.close(set_up)
    for fd in fds:
        os.close(fd)
    os.read(started, 1)  # empty if the child died first: its exit is reported all the same
    os.close(started)
    served.running[pid] = (sock, bool(request["dies_with_parent"]))
    with contextlib.suppress(OSError):  # the requester is gone: its close is seen in the next round
        send(sock, {"pid": pid})
