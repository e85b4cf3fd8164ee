"""The forkserver itself: a new interpreter that imports what a launch needs once, then forks one per request.

It preloads without starting TensorFlow's runtime, does ahead the work every launch would repeat (`PREPARE`),
freezes its heap, and serves a Unix socket: it refuses a start that would not be alike, forks the others
(`child.become_launcher`), reports each child's pid and exit status, kills a child told to die with its
requester when that requester goes, and ends after its owner once the children it forked have.

Before each fork it checks what it otherwise assumes: that the fork is safe (`fork_hazard`: one thread, no
TensorFlow runtime) and that the source it imported is still what is on disk (`Source`); it refuses the start
otherwise, saying why (a stale server: so that the requester replaces it).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib
import os
import pkgutil
import select
import shutil
import signal
import site
import socket
import sys
import sysconfig
import tempfile
import threading

import launcher
from launcher.console import quiet_tensorflow_logs
from launcher.forkserver.alike import THREAD_LIMIT_VARIABLES, cannot_inherit, differs_at_import
from launcher.forkserver.child import ThreadPools, become_launcher
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


def load_quietly() -> None:
    """What the server's own imports are made under, so that it idles on one thread with the C libraries at their
    defaults: no thread limit (each child sets its own: `child.ThreadPools`), and no background thread in pyarrow's
    allocator (jemalloc, imported with pandas: its purging thread, which jemalloc's fork handler leaves out of every
    child anyway). Its children are given their requesters' environment, never this one."""
    for key in THREAD_LIMIT_VARIABLES:
        os.environ.pop(key, None)
    conf = os.environ.get("JE_ARROW_MALLOC_CONF")
    os.environ["JE_ARROW_MALLOC_CONF"] = f"{conf},background_thread:false" if conf else "background_thread:false"


def quiet_thread_pools(pools: ThreadPools) -> None:
    """End the worker threads OpenBLAS started as it loaded, as its own fork handler does before every fork (each
    child starts its own on its first call). The server then runs on one thread (`fork_hazard`)."""
    for lib in pools.controller.lib_controllers:
        if lib.internal_api == "openblas":
            shutdown = getattr(lib.dynlib, "blas_thread_shutdown_", None)
            if shutdown is not None:
                shutdown()


def tensorflow_state() -> str | None:
    """Whether TensorFlow's eager context was made ("eager context made") or its runtime started ("runtime
    initialised") in this process; None when neither (or TensorFlow is not imported). Reads the module's state,
    never makes it: `context_safe()` is None until the first op, device query or context setting."""
    context = sys.modules.get("tensorflow.python.eager.context")
    made = context.context_safe() if context is not None else None
    if made is None:
        return None
    return "runtime initialised" if getattr(made, "_initialized", True) else "eager context made"


def fork_hazard() -> str | None:
    """Why a fork of this process now would not be safe, or None. Another thread: whatever lock it holds stays held
    in the child, its work half done (a dependency's new release can start one as it is imported). TensorFlow's
    context or runtime: its devices, threads and caches would be the server's, not the child's."""
    try:
        threads = os.listdir("/proc/self/task")
        if len(threads) > 1:
            names = []
            for tid in sorted(threads):
                with contextlib.suppress(OSError), open(f"/proc/self/task/{tid}/comm") as comm:
                    names.append(comm.read().strip())
            python = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
            return f"{len(threads)} threads ({', '.join(names)}{'; Python: ' + ', '.join(python) if python else ''})"
        if state := tensorflow_state():
            return f"TensorFlow's {state}"
    except Exception as error:  # a check that fails counts as unsafe
        return f"its fork safety could not be checked ({error!r})"
    return None


class Source:
    """The source the server imported, as it was on disk: a fork runs the modules the server holds beside those it
    imports itself, so once one changed on disk a fork would run a mix of old and new that no new interpreter
    would. Checked before each fork (`changed`), at a cost of a millisecond:

    - each module file outside the standard library and site-packages (the launcher's, the person's own): its stat
      (mtime, size, inode), and when that changed, its content (a file rewritten as it was is not a change);
    - the installed packages by the entries of their site-packages (each `*.dist-info`, `*.egg-info`, `*.pth` by
      name and inode: an install, upgrade or removal replaces them), which is cheaper than the ~5,500 files the
      server imports from there. A file changed in place in site-packages is not seen, nor a new Python, nor a
      change made while the server's imports ran (it is recorded as it is after them)."""

    def __init__(self, sites: list[str] | None = None):
        sites = [*site.getsitepackages(), site.getusersitepackages()] if sites is None else sites
        self.sites = [path for path in sites if os.path.isdir(path)]
        self.installed = self._installed()  # before the imports: an install meanwhile is a change
        self.files: dict[str, tuple] = {}  # path: (stat, content digest)

    def imported(self) -> None:
        """After the imports: the module files to watch, as they are now. Not those the imports wrote themselves
        into the temporary directory (AutoGraph's conversions, `PREPARE`)."""
        libraries = {sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib"), *self.sites}
        installation = tuple(os.path.join(path, "") for path in libraries)
        generated = tempfile.gettempdir()
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if not isinstance(path, str) or path in self.files or path.startswith(installation):
                continue
            if os.path.dirname(path) != generated and (stat := self._stat(path)) and (digest := self._digest(path)):
                self.files[path] = (stat, digest)

    def changed(self) -> str | None:
        """What changed since the server imported it (a module file, or "the installed packages"), else None."""
        for path, (seen, digest) in self.files.items():
            if (stat := self._stat(path)) != seen:
                if self._digest(path) != digest:
                    return path
                self.files[path] = (stat, digest)  # touched or rewritten as it was
        if self._installed() != self.installed:
            return "the installed packages"
        return None

    @staticmethod
    def _stat(path: str) -> tuple | None:
        try:
            stat = os.stat(path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size, stat.st_ino

    @staticmethod
    def _digest(path: str) -> str | None:
        try:
            with open(path, "rb") as file:
                return hashlib.blake2b(file.read(), digest_size=16).hexdigest()
        except OSError:
            return None

    def _installed(self) -> list[tuple[str, int]]:
        kinds = (".dist-info", ".egg-info", ".pth", ".egg-link")
        entries = [entry for path in self.sites for entry in os.scandir(path) if entry.name.endswith(kinds)]
        return sorted((entry.path, entry.inode()) for entry in entries)


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
    if request.get("inherits") and (why := cannot_inherit(request["inherits"])):
        return why
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
    source = Source()
    load_quietly()
    preload()
    pools = ThreadPools()  # the libraries' defaults: loaded with no limit
    quiet_thread_pools(pools)
    freeze_heap()
    source.imported()
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
                _answer(sock, served, imported_under, source, pools, listener, waiting)
            else:  # a running child's requester closed its end
                served.requester_gone(sock)
        served.reap()
    # Nothing left to write or flush: the interpreter's teardown of TensorFlow and MLflow would only hold its
    # owner's exit (which waits for it in `Server.close`) ~2 s.
    os._exit(0)


def _answer(sock, served: _Served, imported_under: dict, source: Source, pools: ThreadPools, listener, waiting) -> None:
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
        send(sock, {"session": os.getsid(0), "executable": sys.executable, "stale": source.changed()})
        sock.close()
        return
    if request.get("op") == "health":  # what it checks before each fork, as it stands
        threads = len(os.listdir("/proc/self/task"))
        send(sock, {"threads": threads, "tensorflow": tensorflow_state(), "stale": source.changed()})
        sock.close()
        return
    refusal, stale = _refusal(request, imported_under), None
    if refusal is None and (stale := source.changed()):  # the requester replaces this server
        refusal = f"stale: {stale} changed since the server imported it"
    if refusal is None and (hazard := fork_hazard()):
        refusal = f"a fork is not safe: {hazard}"
    if refusal:
        for fd in fds:
            os.close(fd)
        send(sock, {"refused": refusal, "stale": bool(stale)})
        sock.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    started, set_up = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(started)
        held = [listener, sock, *waiting, *served.connections()]
        become_launcher(request, pools, fds, sorted({s.fileno() for s in held}), set_up)
    os.close(set_up)
    for fd in fds:
        os.close(fd)
    os.read(started, 1)  # empty if the child died first: its exit is reported all the same
    os.close(started)
    served.running[pid] = (sock, bool(request["dies_with_parent"]))
    with contextlib.suppress(OSError):  # the requester is gone: its close is seen in the next round
        send(sock, {"pid": pid})
