"""The requester's side: start a forkserver, ask it for a child, and hold that child as `subprocess.Popen` would.

`Server` is a server this process started (and closes when it ends); `ForkedProcess` is one forked child, with
the part of Popen's interface the launcher uses (pid, poll, wait, signals, pipes, communicate); `Refused` says
the server cannot fork that start alike, so it must be a new interpreter.
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

from launcher.forkserver.alike import launcher_args
from launcher.forkserver.wire import SOCKET_ENV, receive, send


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
