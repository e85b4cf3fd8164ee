"""`python -m launcher` for the suite, started warm: forked by the launcher's own forkserver
(`launcher.forkserver`: TensorFlow, Keras, MLflow, Hydra and the launcher already imported), one per test
process. Each is a real process of its own (its pid, its signals, its exit status, its own TensorFlow runtime, made
after the fork); it skips the ~10 s of CPU a cold start spends importing (a tiny launch: 15.6-16.4 CPU-s cold,
4.6-5.3 warm, on a 2-core AMD EPYC without AMX).

Every launch, warm or cold, is given the server's socket (`LAUNCHER_FORKSERVER`), so the processes the launcher
starts itself (sweep jobs, local workers, restart attempts) are forked by the same server, as a person's would be
by the server their launch starts.

What the product starts cold (an environment variable read at import changed, `tf_logs=true`) the suite starts
cold too; also a sweep (`-m`: its process records that it never loaded TensorFlow), anything but
`python -m launcher`, and tests that say `cold=True` (those about what a fresh process prints).
`LAUNCHER_TEST_COLD=1` starts every launch cold and gives the launches no server (as the suite did before warm
starts; the launcher then starts its own for its children).

A server whose imported source changed on disk (an edit while the suite runs) refuses as stale: it is replaced by a
new one, as the launcher replaces its own. Why a launch the suite meant warm starts cold is logged at debug level.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess

from support.exit_codes import Launched

from launcher import forkserver
from launcher.forkserver import ForkedProcess, launcher_args
from launcher.forkserver.alike import cold_overrides

COLD_ENV = "LAUNCHER_TEST_COLD"
COLD_ARGS = {"-m", "--multirun"}  # a sweep's own process records that it never loaded TensorFlow
_baseline: dict[str, str] = {}
_server: list[forkserver.Server] = []
# Servers replaced while children they forked still ran, with the CPU they had reported: it counts until each ends
# and is reaped by this process (its own CPU and its children's then reach RUSAGE_CHILDREN).
_replaced: dict[forkserver.Server, float] = {}
log = logging.getLogger(__name__)


def settle_environment() -> None:
    """The environment the server imports under and compares each start with: the test process's once its
    conftest has set it up (not whatever a test had patched when the first launch came)."""
    _baseline.clear()
    _baseline.update(os.environ)


def baseline() -> dict[str, str]:
    """The environment the server imports under."""
    return dict(_baseline or os.environ)


def forks_alike(args: list[str], env: dict, imported_under: dict) -> bool:
    """Whether the suite starts `python -m launcher <args>` with `env` warm from a server that imported under
    `imported_under`: the product's rule (no variable read at import differs, no `tf_logs=true`) and no sweep."""
    if COLD_ARGS & set(args) or cold_overrides(args):
        return False
    return forkserver.differs_at_import(env, imported_under) is None


def _warm_server() -> forkserver.Server | None:
    """This test process's server, started on first use; None when the suite runs cold."""
    if os.environ.get(COLD_ENV) == "1":
        return None
    if not _server:
        _server.append(forkserver.Server(baseline()))
    elif _server[0].process.poll() is None and _ask(_server[0], "hello").get("stale"):
        _replace_server(_server[0])
    return _server[0] if _server[0].process.poll() is None else None


def children_cpu() -> float:
    """CPU seconds of the processes this test process's servers have forked and reaped (conftest's CPU account)."""
    for server in [s for s in _replaced if s.process.poll() is not None]:  # reaped: in RUSAGE_CHILDREN now
        del _replaced[server]
    replaced = sum(_replaced.values())
    if not _server or _server[0].process.poll() is not None:
        return replaced
    return replaced + _reaped_cpu(_server[0])


def _reaped_cpu(server: forkserver.Server) -> float:
    return float(_ask(server, "cpu").get("cpu", 0.0))


def _ask(server: forkserver.Server, op: str) -> dict:
    """The server's answer to `op` (empty when it does not answer)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock, contextlib.suppress(OSError):
        sock.connect(server.path)
        forkserver.send(sock, {"op": op})
        answer, _ = forkserver.receive(sock)
        return answer or {}
    return {}


def _replace_server(stale: forkserver.Server) -> forkserver.Server:
    """A new server for this test process in place of `stale`, whose imported source changed on disk: that one
    forks no more and ends once its children have."""
    cpu = _reaped_cpu(stale)
    stale.close()  # reaped here when no child is left
    if stale.process.poll() is None:
        _replaced[stale] = cpu
    _server[0] = forkserver.Server(baseline())
    return _server[0]


def _with_server(env: dict | None) -> dict:
    """The launch's environment, given this test process's server for the children the launcher starts."""
    env = dict(os.environ if env is None else env)
    server = _warm_server() if env.get(forkserver.SOCKET_ENV) is None else None
    if server is not None:
        env[forkserver.SOCKET_ENV] = server.path
    return env


def _warm(args, env: dict, cold: bool) -> str | None:
    """The server's socket when this launch starts warm."""
    launcher = launcher_args(args)
    if cold or launcher is None or not forks_alike(launcher, env, baseline()):
        return None
    server = _warm_server()
    return server.path if server is not None else None


def Popen(args, *, cold: bool = False, env: dict | None = None, cwd=None, **options):  # noqa: N802
    """`subprocess.Popen` for `python -m launcher`: warm when it can be, else cold (`cold=True`: always cold)."""
    env = _with_server(env)
    warm_options = {"stdout", "stderr", "text", "start_new_session"}
    path = None if set(options) - warm_options else _warm(args, env, cold)
    if path is not None:
        try:
            return ForkedProcess(path, args, cwd=cwd, env=env, **options)
        except forkserver.Refused as refused:
            why = str(refused)
            if refused.stale and _server and _server[0].path == path:
                server = _replace_server(_server[0])
                if env.get(forkserver.SOCKET_ENV) == path:
                    env[forkserver.SOCKET_ENV] = server.path
                try:
                    return ForkedProcess(server.path, args, cwd=cwd, env=env, **options)
                except forkserver.Refused as again:
                    why = str(again)
            log.debug("%s starts cold: %s", " ".join(map(str, args)), why)
    return subprocess.Popen(args, cwd=cwd, env=env, **options)


def run(args, *, cwd=None, env=None, timeout: float | None = None, cold: bool = False) -> Launched:
    """`subprocess.run(args, capture_output=True, text=True, ...)` for `python -m launcher`, warm when it can be;
    the test must look at its exit code (`support.exit_codes`)."""
    process = Popen(args, cold=cold, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    return Launched(args, process.returncode, out, err)
