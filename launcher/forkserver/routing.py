"""Where a start goes: forked by the server this process tree shares when the fork is alike, else a new
interpreter. One server per tree: the first warm start of a process starts its own (`_own_server`), and its
socket passes to every child in LAUNCHER_FORKSERVER, so nested starts (a sweep job's restarts) reuse it.

A server whose imported source changed on disk refuses as stale: this process's own is then replaced by a new one
(`_replace_own`), another's (inherited) passed over for this process's own. Why a launch starts cold goes to the
debug log (`hydra.verbose=launcher.forkserver`: the console and the run dir's `console.log`).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading

from launcher.forkserver.alike import cold_overrides, launcher_args
from launcher.forkserver.child import die_with_parent
from launcher.forkserver.requester import ForkedProcess, Refused, Server
from launcher.forkserver.wire import SOCKET_ENV, receive, send
from launcher.outcome import FORKED_BY_ENV

_own: list[Server] = []
_own_failed: list[str] = []
_own_lock = threading.RLock()
log = logging.getLogger(__name__)


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


def _replace_own(stale: str, env: dict) -> str | None:
    """This process's server started anew in place of the one at `stale`, whose imported source changed on disk:
    that one forks no more and ends once its children have. None when `stale` is not this process's own."""
    with _own_lock:
        if not _own or _own[0].path != stale:
            return None
        _own.pop().close()
        path = _own_server(env)
    if path is not None and os.environ.get(SOCKET_ENV) == stale:  # exported by `share`: later children take the new
        os.environ[SOCKET_ENV] = path
    return path


def _answers_for_this_session(path: str) -> bool:
    """Whether the server at `path` is up and can fork children for this process's session and interpreter."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(path)
            send(sock, {"op": "hello"})
            answer, _ = receive(sock)
        except OSError:
            return False
    return (
        bool(answer)
        and answer["session"] == os.getsid(0)
        and answer["executable"] == sys.executable
        and not answer.get("stale")  # its source changed: this process's own, new, instead
    )


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
    cold = _why_cold(overrides, inherited)
    if cold is None:
        refusals: list[str] = []
        tried: set[str] = set()
        replaced = False
        for candidate in (inherited, "own"):  # the inherited server, else this process's own
            path = _own_server(env) if candidate == "own" else candidate
            while path and path not in tried:
                tried.add(path)
                try:
                    return ForkedProcess(
                        path, args, cwd=cwd, env={**env, SOCKET_ENV: path}, dies_with_parent=dies_with_parent, **options
                    )
                except Refused as refused:
                    refusals.append(str(refused))
                    stale, path = (path if refused.stale and not replaced else None), None
                    if stale:  # this process's own is replaced (once per start) and asked again
                        path = _replace_own(stale, env)
                        replaced = path is not None
        cold = "; ".join(refusals) or f"no forkserver ({_own_failed[0] if _own_failed else 'none started'})"
    if overrides is not None:
        log.debug("python -m launcher %s starts cold: %s", " ".join(overrides), cold)
    if dies_with_parent:
        options["preexec_fn"] = die_with_parent
    return subprocess.Popen(args, cwd=cwd, env=env, **options)


def _why_cold(overrides: list[str] | None, inherited: str | None) -> str | None:
    """Why a start must be a new interpreter whatever the server, or None."""
    if overrides is None:
        return "not the launcher"
    if inherited == "off":
        return f"{SOCKET_ENV}=off"
    if sys.platform != "linux":
        return f"no fork on {sys.platform}"
    if found := cold_overrides(overrides):
        return f"{', '.join(found)} (TensorFlow's start-up lines come from its import)"
    return None
