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
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import importlib
import io
import json
import os
import pkgutil
import runpy
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types

import setproctitle
import threadpoolctl

import launcher
from launcher.console import LOG_LEVEL_DEFAULTS, quiet_tensorflow_logs
from launcher.outcome import FORKED_BY_ENV

SOCKET_ENV = "LAUNCHER_FORKSERVER"  # a running server's socket (inherited by children), or "off"
# Read when TensorFlow, Keras, the C libraries or Python load: a start that changes one is cold.
IMPORT_TIME_PREFIXES = (
    *("TF_", "KERAS_", "CUDA", "XLA_", "OMP_", "KMP_", "MKL", "OPENBLAS", "PYTHON", "LD_", "LC_", "GRPC_", "ABSL_"),
)
IMPORT_TIME_NAMES = {"HOME", "MALLOC_ARENA_MAX", "LANG", "LANGUAGE"}
# Thread limits the BLAS and OpenMP libraries read when they load (joblib's workers set them, so a parallel sweep's
# jobs have them): a forked child applies them to the loaded libraries (threadpoolctl), by threadpoolctl's names.
THREAD_LIMITS = {
    "OMP_NUM_THREADS": "openmp",
    "OPENBLAS_NUM_THREADS": "openblas",
    "MKL_NUM_THREADS": "mkl",
    "BLIS_NUM_THREADS": "blis",
}
# Read after the fork: the strategy's cluster, the output buffering (each child's stdio is made new), the thread
# limits (above). KMP_INIT_AT_FORK: joblib sets it when imported (so in a sweep's workers, not in a fresh server);
# only Intel's OpenMP runtime reads it, which TensorFlow's wheels do not load. The CUDA driver reads which GPUs
# it shows, and in what order, at cuInit, when the runtime first lists devices (its "failed call to cuInit" line
# comes then, not at import): submitit's local jobs set CUDA_VISIBLE_DEVICES.
READ_LATER = {
    *("TF_CONFIG", "PYTHONUNBUFFERED", *THREAD_LIMITS, "KMP_INIT_AT_FORK"),
    *("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"),
}
COLD_ARGS = {"tf_logs=true"}  # TensorFlow's C++ start-up lines come from its import
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
    "launcher.train.engine:convert_chunk_loops",
    "launcher.run.mlflow_record:index_installed_packages",
    "launcher.config.schema:store_schemas",
)


def differs_at_import(env: dict, imported_under: dict) -> str | None:
    """The first variable read at import whose value in `env` is not the one the server imported under. Both as
    a launch imports under them: with the log levels it sets when they are unset (a launch's children inherit
    the ones it set; a new interpreter would set the same before its import)."""
    env, imported_under = {**LOG_LEVEL_DEFAULTS, **env}, {**LOG_LEVEL_DEFAULTS, **imported_under}
    for key in sorted(set(env) | set(imported_under)):
        loaded = key.startswith(IMPORT_TIME_PREFIXES) or key in IMPORT_TIME_NAMES
        if loaded and key not in READ_LATER and env.get(key) != imported_under.get(key):
            return key
    return None


# ---------------------------------------------------------------------------------------------------- wire format
def send(sock: socket.socket, message: dict, fds: list[int] | tuple = ()) -> None:
    data = json.dumps(message).encode()
    socket.send_fds(sock, [struct.pack("!I", len(data)) + data], list(fds))


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    header, fds, _, _ = socket.recv_fds(sock, 4, max_fds)
    if len(header) < 4:
        return None, fds
    (size,) = struct.unpack("!I", header)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None, fds
        data += chunk
    return json.loads(data), fds


# ---------------------------------------------------------------------------------------------------- the server
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


def _fresh_stdio(env: dict) -> None:
    """Stdout and stderr as a new interpreter makes them for these descriptors: line-buffered on a terminal,
    unbuffered under PYTHONUNBUFFERED (the server's were made for its own pipe)."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(
            raw if unbuffered else io.BufferedWriter(raw),
            encoding=old.encoding,
            errors=old.errors,
            line_buffering=not unbuffered and (name == "stderr" or os.isatty(fd)),
            write_through=unbuffered,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _thread_limits(env: dict, imported_under: dict) -> None:
    """The BLAS and OpenMP thread limits this child was given where they differ from the server's: applied to the
    libraries already loaded, as they would have read them loading in a new interpreter."""
    limits = {}
    for key, api in THREAD_LIMITS.items():
        value = env.get(key, "")
        if value != imported_under.get(key, "") and value.isdigit() and int(value) > 0:
            limits[api] = int(value)
    if limits:
        threadpoolctl.threadpool_limits(limits=limits)


def _become_launcher(request: dict, imported_under: dict, fds: list[int], inherited: list[int], started: int) -> None:
    """In the fork: become `python -m launcher <args>`; never returns. Writes to `started` once its session,
    group and stdio are set, as `subprocess.Popen` returns only after the exec."""
    code = 1
    try:
        for fd in inherited:
            os.close(fd)
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        if request["new_session"]:
            os.setsid()
        elif request["group"] != os.getpgid(0):
            os.setpgid(0, request["group"])  # the requester's group, as a cold child's: its Ctrl-C reaches it
        if request["dies_with_parent"]:
            parent_death_signal(signal.SIGKILL)  # the server; it kills this child when the requester goes
        os.write(started, b"1")
        os.close(started)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # What ps, top and pgrep show: this child's command line, not the server's.
        setproctitle.setproctitle(" ".join([request["executable"], "-m", "launcher", *request["args"]]))
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ[FORKED_BY_ENV] = str(os.getppid())
        os.chdir(request["cwd"])
        sys.path[0] = request["cwd"]  # as `python -m` does: the working directory first
        _fresh_stdio(request["env"])
        _thread_limits(request["env"], imported_under)
        sys.modules["__main__"] = types.ModuleType("__main__")
        sys.argv = ["-m", *request["args"]]
        try:
            runpy._run_module_as_main("launcher", alter_argv=True)  # what `python -m launcher` calls
            code = 0
        except SystemExit as exit_:
            if exit_.code is None or isinstance(exit_.code, int):
                code = exit_.code or 0
            else:
                print(exit_.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        # The interpreter's own exit: join non-daemon threads, run atexit handlers, flush.
        threading._shutdown()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    except BaseException:  # setting up the process failed: say why where its stderr goes
        traceback.print_exc()
    finally:
        os._exit(code)


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
        _become_launcher(request, imported_under, fds, sorted({s.fileno() for s in held}), set_up)
    os.close(set_up)
    for fd in fds:
        os.close(fd)
    os.read(started, 1)  # empty if the child died first: its exit is reported all the same
    os.close(started)
    served.running[pid] = (sock, bool(request["dies_with_parent"]))
    with contextlib.suppress(OSError):  # the requester is gone: its close is seen in the next round
        send(sock, {"pid": pid})


def parent_death_signal(sig: int) -> None:
    """Linux: this process gets `sig` when the one that forked it dies (best effort)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG


def die_with_parent() -> None:
    """A new interpreter's `preexec_fn`: SIGKILL if the process that started it dies without passing a signal
    on (no training left running, holding the run dir, after its supervisor is gone)."""
    parent_death_signal(signal.SIGKILL)


# ---------------------------------------------------------------------------------------------------- the client
class Server:
    """A forkserver this process started: a new interpreter that imports, then forks on request."""

    def __init__(self, env: dict):
        self.folder = tempfile.mkdtemp(prefix="launcher-forkserver-")
        self.path = os.path.join(self.folder, "socket")
        code = f"from launcher.forkserver import serve; serve({self.path!r}, {os.getpid()})"
        env = {k: v for k, v in env.items() if k != SOCKET_ENV}
        self.process = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            self.process.kill()
            self.process.wait(30)
            self.close()
            raise RuntimeError(f"the launcher's forkserver did not start (exit {self.process.poll()})")
        atexit.register(self.close)

    def close(self) -> None:
        """No new start; the server ends once the children it forked have. Waited for when none is left (its exit
        and CPU reach this process, as a child's do); else it finishes on its own after this process."""
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(self.path)
            send(sock, {"op": "close", "owner": os.getpid()})
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(2)
        shutil.rmtree(self.folder, ignore_errors=True)


class Refused(Exception):
    """The server cannot fork this start alike: it must be cold."""


class ForkedProcess:
    """What the launcher uses of `subprocess.Popen`, for a child a forkserver forked."""

    def __init__(
        self,
        socket_path: str,
        args: list[str],
        *,
        cwd,
        env: dict,
        stdout=None,
        stderr=None,
        text: bool = False,
        start_new_session: bool = False,
        dies_with_parent: bool = False,
    ):
        self.args = args
        self.returncode: int | None = None
        self.cpu: float | None = None  # the child's CPU seconds, once it ended
        self.stdout = self.stderr = None
        self._text = text
        self._pipes: list[int] = []
        given = [os.open(os.devnull, os.O_RDONLY), self._child_end(stdout, 1)]
        if stdout == subprocess.PIPE:
            self.stdout = os.fdopen(self._pipes[-1], "r" if text else "rb")
        given.append(os.dup(given[1]) if stderr == subprocess.STDOUT else self._child_end(stderr, 2))
        if stderr == subprocess.PIPE:
            self.stderr = os.fdopen(self._pipes[-1], "r" if text else "rb")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.connect(socket_path)
            request = {
                "args": launcher_args(args),
                "executable": sys.executable,
                "env": env,
                "cwd": str(cwd or os.getcwd()),
                "new_session": bool(start_new_session),
                "session": os.getsid(0),
                "group": os.getpgid(0),
                "dies_with_parent": bool(dies_with_parent),
            }
            send(self._sock, request, given)
            answer, _ = receive(self._sock)
        except OSError as error:
            self._abandon()
            raise Refused(f"the forkserver at {socket_path} is gone ({error})") from error
        finally:
            for fd in given:
                os.close(fd)
        if answer is None or "pid" not in answer:
            self._abandon()
            raise Refused((answer or {}).get("refused", "the forkserver closed the connection"))
        self.pid = answer["pid"]

    def _child_end(self, spec, inherited: int) -> int:
        if spec is None:
            return os.dup(inherited)
        if spec == subprocess.DEVNULL:
            return os.open(os.devnull, os.O_RDWR)
        if spec == subprocess.PIPE:
            read, write = os.pipe()
            self._pipes.append(read)
            return write
        return os.dup(spec if isinstance(spec, int) else spec.fileno())

    def _abandon(self) -> None:
        self._sock.close()
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()

    def _collect(self) -> None:
        answer, _ = receive(self._sock)
        self._sock.close()
        if answer is None:  # the server ended first (its owner is ending): the child's status is not known
            raise ChildProcessError(f"the launcher's forkserver ended while process {self.pid} ran")
        self.returncode = answer["returncode"]
        self.cpu = answer["cpu"]

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._sock], [], [], 0)[0]:
            self._collect()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._sock], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._collect()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple:
        deadline = None if timeout is None else time.monotonic() + timeout
        streams = [s for s in (self.stdout, self.stderr) if s is not None]
        chunks: dict[int, list[bytes]] = {id(s): [] for s in streams}
        open_ = {s.fileno(): s for s in streams}
        while open_:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = select.select(list(open_), [], [], left)[0]
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout)
            for fd in ready:
                data = os.read(fd, 1 << 16)
                if data:
                    chunks[id(open_[fd])].append(data)
                else:
                    open_.pop(fd).close()
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

        def read(stream):
            if stream is None:
                return None
            data = b"".join(chunks[id(stream)])
            if not self._text:
                return data
            return data.decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")  # as text mode reads

        return read(self.stdout), read(self.stderr)


def launcher_args(args) -> list[str] | None:
    """The launcher's arguments when `args` is `[sys.executable, "-m", "launcher", ...]`."""
    args = [str(a) for a in args]
    if args[:3] == [sys.executable, "-m", "launcher"]:
        return args[3:]
    return None


_own: list[Server] = []
_own_failed: list[str] = []
_own_lock = threading.Lock()


def _own_server(env: dict) -> str | None:
    """This process's server (started on first use, under `env`), or None when it could not start."""
    with _own_lock:
        if not _own and not _own_failed:
            try:
                _own.append(Server(env))
            except (OSError, RuntimeError) as error:
                _own_failed.append(str(error))
                print(f"launcher: child processes start cold ({error})", file=sys.stderr, flush=True)
        return _own[0].path if _own else None


def _answers_for_this_session(path: str) -> bool:
    """Whether the server at `path` is up and can fork children for this process's session and interpreter."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(path)
            send(sock, {"op": "hello"})
            answer, _ = receive(sock)
        except OSError:
            return False
    return bool(answer) and answer["session"] == os.getsid(0) and answer["executable"] == sys.executable


def share() -> str | None:
    """One server for every launcher process this one starts, directly or through others (joblib's workers,
    submitit's local jobs): a usable inherited one, else this process's own, exported in LAUNCHER_FORKSERVER.
    Started now, before those processes copy the environment. None when children start cold."""
    inherited = os.environ.get(SOCKET_ENV)
    if inherited == "off" or sys.platform != "linux":
        return None
    if inherited and _answers_for_this_session(inherited):
        return inherited
    path = _own_server(dict(os.environ))
    if path is not None:
        os.environ[SOCKET_ENV] = path
    return path


def start(args: list[str], *, cwd, env: dict | None = None, dies_with_parent: bool = False, **options):
    """`subprocess.Popen(args, ...)` for `python -m launcher <overrides>`: forked by a forkserver when the fork
    is alike, else a new interpreter. `dies_with_parent`: SIGKILL when this process dies without passing a
    signal on. `options`: stdout, stderr, text, start_new_session."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != FORKED_BY_ENV}
    overrides = launcher_args(args)
    inherited = env.get(SOCKET_ENV)
    warm = overrides is not None and inherited != "off" and not COLD_ARGS & set(overrides)
    if warm and sys.platform == "linux":
        for path in (inherited, "own"):
            path = _own_server(env) if path == "own" else path
            if not path:
                continue
            try:
                return ForkedProcess(
                    path, args, cwd=cwd, env={**env, SOCKET_ENV: path}, dies_with_parent=dies_with_parent, **options
                )
            except Refused:
                continue  # the inherited server cannot fork this alike: this process's own, else cold
    if dies_with_parent:
        options["preexec_fn"] = die_with_parent
    return subprocess.Popen(args, cwd=cwd, env=env, **options)
