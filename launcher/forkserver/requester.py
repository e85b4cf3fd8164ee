"""The requester's side: start a forkserver, ask it for a child, and hold that child as `subprocess.Popen` would.

`Server` is a server this process started (and closes when it ends); `ForkedProcess` is one forked child, with
the part of Popen's interface the launcher uses (pid, poll, wait, signals, pipes, communicate); `Refused` says
the server cannot fork that start alike, so it must be a new interpreter.

The server reports each child's exit, but it can die first (the OOM killer picks the largest process: often the
server, which holds every import). Its children run on, so a `ForkedProcess` then watches its child through a
pidfd (its end, not its status: only a parent gets that) and `returncode_of` takes the status from the child's
own outcome record.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from launcher.forkserver.alike import inherited, launcher_args
from launcher.forkserver.wire import SOCKET_ENV, receive, send
from launcher.outcome import OutcomeRecord

# The return code of a child whose server died before reporting its exit and that left no outcome record of its
# own: it most likely died as the server did (the OOM killer), so it is reported killed.
LOST_STATUS = -signal.SIGKILL


class Server:
    """A forkserver this process started: a new interpreter that imports, then forks on request."""

    def __init__(self, env: dict):
        self.folder = tempfile.mkdtemp(prefix="launcher-forkserver-")
        self.path = os.path.join(self.folder, "socket")
        code = f"from launcher.forkserver.server import serve; serve({self.path!r}, {os.getpid()})"
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
    """The server cannot fork this start alike: it must be cold. `stale`: the source it imported changed since, so
    a new server would fork it."""

    def __init__(self, why: str, stale: bool = False):
        super().__init__(why)
        self.stale = stale


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
        self.server_lost = False  # the server died before it reported the child's exit (`returncode_of`)
        self._pidfd: int | None = None
        self.stdout = self.stderr = None
        self._text = text
        self._pipes: list[int] = []
        given = [_stdin(), self._child_end(stdout, 1)]
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
                "cwd": os.path.join(os.getcwd(), cwd) if cwd else os.getcwd(),  # a relative one: from here, as Popen
                "new_session": bool(start_new_session),
                "session": os.getsid(0),
                "group": os.getpgid(0),
                "dies_with_parent": bool(dies_with_parent),
                "inherits": inherited(),  # affinity, resource limits, umask: a new interpreter's from this process
                "requester": os.getpid(),  # whom a child told to die with its parent dies with
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
            answer = answer or {}
            raise Refused(answer.get("refused", "the forkserver closed the connection"), bool(answer.get("stale")))
        self.pid = answer["pid"]
        self._pidfd = _open_pidfd(self.pid)  # while the server holds it: this child, not a later one with its pid

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
        try:
            answer, _ = receive(self._sock)
        except OSError:  # reset by a server that died
            answer = None
        self._sock.close()
        if answer is None:  # the server died first (the OOM killer): its child runs on, watched from here
            self.server_lost = True
            print(
                f"launcher: the forkserver ended before process {self.pid} did; watching that process until it ends",
                file=sys.stderr,
                flush=True,
            )
            return
        self._ended(answer["returncode"], answer["cpu"])

    def _ended(self, returncode: int, cpu: float | None) -> None:
        self.returncode, self.cpu = returncode, cpu
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def _watch(self, timeout: float | None) -> bool:
        """Wait up to `timeout` for news of the child: its exit from the server or, once the server is gone, its
        end (without a status: `LOST_STATUS`). Whether it ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.server_lost:
                if not select.select([self._sock], [], [], left)[0]:
                    return False
                self._collect()
            elif self._pidfd is not None:
                if not select.select([self._pidfd], [], [], left)[0]:
                    return False
                self._ended(LOST_STATUS, None)
            elif _running(self.pid):  # no pidfd (Linux < 5.3): look every 0.1 s
                if left is not None and left <= 0:
                    return False
                time.sleep(0.1 if left is None else min(0.1, left))
            else:
                self._ended(LOST_STATUS, None)
        return True

    def poll(self) -> int | None:
        self._watch(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._watch(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile, as Popen's
                if self._pidfd is not None:
                    signal.pidfd_send_signal(self._pidfd, sig)
                else:
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


def returncode_of(process, outcome: OutcomeRecord | None) -> int:
    """`process.returncode` once it ended, as `subprocess` reports it. For a forked child whose server died before
    reporting its exit: the exit code in the outcome record it wrote itself (`outcome`, read from its run dir,
    when its `pid` is the child's), else `LOST_STATUS` (it died unrecorded, most likely with the server)."""
    if getattr(process, "server_lost", False) and outcome is not None and outcome.pid == process.pid:
        return outcome.exit_code
    return process.returncode


def _open_pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when `pid` ends, for a process that is not this one's child; None
    before Linux 5.3 or when it has already ended."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _running(pid: int) -> bool:
    """Whether `pid` runs (an ended process nobody reaped yet, a zombie, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _stdin() -> int:
    """The child's stdin: this process's, as a new interpreter inherits it (/dev/null when it has none)."""
    try:
        return os.dup(0)
    except OSError:
        return os.open(os.devnull, os.O_RDONLY)
