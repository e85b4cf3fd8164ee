"""`python -m launcher` for the suite, started warm: forked from a server process that has already imported
TensorFlow, Keras, MLflow, Hydra and the launcher, then run as `python -m` runs it (`runpy` into a fresh
`__main__`, the interpreter's exit path: non-daemon threads joined, `atexit` handlers run). Each is a real process
of its own (its pid, its signals, its exit status, its own TensorFlow runtime, made after the fork); it skips the
~10 s of CPU a cold start spends importing (a tiny launch: 15.6-16.4 CPU-s cold, 4.6-5.3 warm, on a 2-core
AMD EPYC without AMX).

What a process settles when it imports makes a start cold (a new interpreter through `subprocess`): a change to an
environment variable TensorFlow, Keras, the C libraries or Python read when loaded, `tf_logs=true` (TensorFlow's
C++ start-up lines come from the import), a sweep (`-m`: its process records that it never loaded TensorFlow),
anything but `python -m launcher`, and tests that say `cold=True` (those about what a fresh process prints).
`LAUNCHER_TEST_COLD=1` starts every launch cold, as the suite did before warm starts.

One server per test process, started on first use. Each start is one Unix-socket connection that carries the
argv, environment, working directory and stdio descriptors (SCM_RIGHTS); the server forks, answers the pid and,
once it has reaped the process, its exit code and CPU time (`children_cpu`, for conftest's CPU account).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
COLD_ENV = "LAUNCHER_TEST_COLD"
# Environment variables read when TensorFlow, Keras, the C libraries or Python load: a start that changes one is
# cold. TF_CONFIG is read when a strategy is made, after the fork.
IMPORT_TIME = ("TF_", "KERAS_", "CUDA", "XLA_", "OMP_", "KMP_", "MKL", "OPENBLAS", "PYTHON", "LD_", "GRPC_", "ABSL_")
IMPORT_TIME_NAMES = {"HOME", "MALLOC_ARENA_MAX"}
READ_LATER = {"TF_CONFIG"}
# tf_logs=true: TensorFlow's C++ start-up lines come from its import. A sweep (-m): its own process records that it
# never loaded TensorFlow (the jobs did, each in a process of its own), which a fork of the server cannot be.
COLD_ARGS = {"tf_logs=true", "-m", "--multirun"}

children_cpu = 0.0  # CPU seconds of the warm processes this process has waited for
_baseline: dict[str, str] = {}


def settle_environment() -> None:
    """The environment the server imports under and compares each start with: the test process's once its
    conftest has set it up (not whatever a test had patched when the first launch came)."""
    _baseline.clear()
    _baseline.update(os.environ)


def _send(sock: socket.socket, message: dict, fds: list[int] | tuple = ()) -> None:
    data = json.dumps(message).encode()
    socket.send_fds(sock, [struct.pack("!I", len(data)) + data], list(fds))


def _receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
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
def _preload() -> None:
    """What a launch imports before it trains. Nothing here starts TensorFlow's runtime (no op, no device list):
    each child makes its own after the fork."""
    import importlib
    import pkgutil

    from launcher.console import quiet_tensorflow_logs

    quiet_tensorflow_logs(False)  # what a launch without tf_logs=true does before it imports TensorFlow
    import launcher

    for module in pkgutil.walk_packages(launcher.__path__, "launcher."):
        if module.name != "launcher.__main__":  # run as __main__ by each child, as `python -m` does
            importlib.import_module(module.name)
    # What a tracked launch imports later (measured with -X importtime: ~0.7 s): MLflow's Keras flavour and system
    # metrics, GitPython (MLflow's source tags), scikit-learn's datasets (the digits).
    for name in (
        "keras",
        "mlflow.tracking",
        "mlflow.store.tracking.sqlalchemy_store",
        "mlflow.keras",
        "mlflow.pyfunc",
        "mlflow.system_metrics.system_metrics_monitor",
        "git",
        "sklearn.datasets",
        "hydra_plugins.launcher_search",
    ):
        importlib.import_module(name)


def _become_launcher(request: dict, fds: list[int], inherited: list[int], started: int) -> None:
    """In the fork: become `python -m launcher <args>`; never returns. Writes to `started` once its session and
    stdio are set, as `subprocess.Popen` returns only after the exec."""
    code = 1
    try:
        for fd in inherited:
            os.close(fd)
        if request["new_session"]:
            os.setsid()
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        os.write(started, b"1")
        os.close(started)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.path[0] = request["cwd"]  # as `python -m` does: the working directory first
        import runpy
        import types

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
            import traceback

            traceback.print_exc()
        # The interpreter's own exit: join non-daemon threads, run atexit handlers, flush.
        import atexit as exit_handlers
        import threading

        threading._shutdown()
        exit_handlers._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    finally:
        os._exit(code)


def serve(path: str, parent: int) -> None:
    """Fork a launcher per request; report each one's exit. Ends with the test process that started it."""
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)  # nobody reads this pipe after "ready"
    running: dict[int, socket.socket] = {}
    waiting: list[socket.socket] = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while os.getppid() == parent:
            readable, _, _ = select.select([listener, *waiting], [], [], 0.05)
            for sock in readable:
                if sock is listener:
                    waiting.append(listener.accept()[0])
                    continue
                waiting.remove(sock)
                request, fds = _receive(sock, 3)
                if request is None:
                    sock.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                started, set_up = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(started)
                    _become_launcher(
                        request,
                        fds,
                        [listener.fileno(), sock.fileno(), *(s.fileno() for s in waiting)]
                        + [s.fileno() for s in running.values()],
                        set_up,
                    )
                os.close(set_up)
                for fd in fds:
                    os.close(fd)
                os.read(started, 1)  # empty if the child died first: its exit is reported all the same
                os.close(started)
                running[pid] = sock
                _send(sock, {"pid": pid})
            while running:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
                if pid == 0:
                    break
                sock = running.pop(pid, None)
                if sock is None:
                    continue
                exit_ = {"returncode": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime}
                with contextlib.suppress(OSError):  # the test stopped waiting
                    _send(sock, exit_)
                sock.close()
    finally:
        for pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------------------------------------- the client
class Server:
    """The warm server of this test process."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="launcher-warm-")
        self.path = os.path.join(self.folder, "socket")
        self.env = baseline()
        code = f"import sys; sys.path[0] = {str(TESTS)!r}; import warm; warm.serve({self.path!r}, {os.getpid()})"
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, env=self.env, stdout=subprocess.PIPE, text=True
        )
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(
                f"the warm launcher server did not start (it printed {line!r}); {COLD_ENV}=1 starts cold"
            )
        atexit.register(self.close)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)
        shutil.rmtree(self.folder, ignore_errors=True)


def baseline() -> dict[str, str]:
    """The environment the server imports under."""
    return dict(_baseline or os.environ)


def forks_alike(args: list[str], env: dict, imported_under: dict) -> bool:
    """Whether a fork of a server that imported under `imported_under` is the process `python -m launcher <args>`
    with `env` would be: no argument and no variable that is read at import differs."""
    if COLD_ARGS & set(args):
        return False
    for key in set(env) | set(imported_under):
        loaded = key.startswith(IMPORT_TIME) or key in IMPORT_TIME_NAMES
        if loaded and key not in READ_LATER and env.get(key) != imported_under.get(key):
            return False
    return True


_server: list[Server] = []


def _warm_server() -> Server:
    if not _server:
        _server.append(Server())
    return _server[0]


def launcher_args(args) -> list[str] | None:
    """The launcher's arguments when `args` is `[sys.executable, "-m", "launcher", ...]`."""
    args = [str(a) for a in args]
    if args[:3] == [sys.executable, "-m", "launcher"]:
        return args[3:]
    return None


class WarmProcess:
    """What the suite uses of `subprocess.Popen`, for a launcher the warm server forked."""

    def __init__(self, args, *, cwd=None, env=None, stdout=None, stderr=None, text=False, start_new_session=False):
        self.args = args
        self.returncode: int | None = None
        self.stdout = self.stderr = None
        self._text = text
        given: list[int] = []  # the child's stdin, stdout, stderr

        def child_end(spec, inherited: int) -> int:
            if spec is None:
                return os.dup(inherited)
            if spec == subprocess.DEVNULL:
                return os.open(os.devnull, os.O_RDWR)
            if spec == subprocess.PIPE:
                read, write = os.pipe()
                self._pipes.append(read)
                return write
            return os.dup(spec if isinstance(spec, int) else spec.fileno())

        self._pipes: list[int] = []
        given.append(os.open(os.devnull, os.O_RDONLY))
        given.append(child_end(stdout, 1))
        if stdout == subprocess.PIPE:
            self.stdout = os.fdopen(self._pipes[-1], "r" if text else "rb")
        given.append(os.dup(given[1]) if stderr == subprocess.STDOUT else child_end(stderr, 2))
        if stderr == subprocess.PIPE:
            self.stderr = os.fdopen(self._pipes[-1], "r" if text else "rb")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.connect(_warm_server().path)
            request = {
                "args": launcher_args(args),
                "env": dict(os.environ if env is None else env),
                "cwd": str(cwd or os.getcwd()),
                "new_session": bool(start_new_session),
            }
            _send(self._sock, request, given)
        finally:
            for fd in given:
                os.close(fd)
        answer, _ = _receive(self._sock)
        if answer is None:
            raise RuntimeError("the warm launcher server closed the connection")
        self.pid = answer["pid"]

    def _collect(self) -> None:
        global children_cpu
        answer, _ = _receive(self._sock)
        self._sock.close()
        if answer is None:
            raise RuntimeError(f"the warm launcher server stopped while {self.pid} ran")
        self.returncode = answer["returncode"]
        children_cpu += answer["cpu"]

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

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None):
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


def _warm(args, env: dict | None) -> bool:
    launcher = launcher_args(args)
    env = dict(os.environ if env is None else env)
    if launcher is None or os.environ.get(COLD_ENV) == "1" or not forks_alike(launcher, env, baseline()):
        return False
    return _warm_server().process.poll() is None


def Popen(args, *, cold: bool = False, **options):  # noqa: N802  (stands in for subprocess.Popen)
    """`subprocess.Popen` for `python -m launcher`: warm when it can be, else cold (`cold=True`: always cold)."""
    warm_options = {"cwd", "env", "stdout", "stderr", "text", "start_new_session"}
    if cold or set(options) - warm_options or not _warm(args, options.get("env")):
        return subprocess.Popen(args, **options)
    return WarmProcess(args, **options)


def run(args, *, cwd=None, env=None, timeout: float | None = None, cold: bool = False) -> subprocess.CompletedProcess:
    """`subprocess.run(args, capture_output=True, text=True, ...)` for `python -m launcher`, warm when it can be."""
    if cold or not _warm(args, env):
        return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    process = WarmProcess(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    return subprocess.CompletedProcess(args, process.returncode, out, err)
