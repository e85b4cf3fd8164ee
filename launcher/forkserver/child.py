"""In the fork: the server's copy becomes `python -m launcher <args>` as a new interpreter would be.

Its session or process group, stdio, environment, working directory and command line are set as the requester's
new interpreter would have had them, then `runpy` runs the launcher in a fresh `__main__` and the process ends by
the interpreter's own exit path (threads joined, `atexit` run, streams flushed). Kept apart from the server because
nothing here may touch the server's state: it runs in the child only.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import io
import os
import runpy
import select
import signal
import sys
import threading
import traceback
import types

import setproctitle
import threadpoolctl

from launcher.forkserver.alike import THREAD_LIMITS
from launcher.outcome import FORKED_BY_ENV


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


def become_launcher(request: dict, imported_under: dict, fds: list[int], inherited: list[int], started: int) -> None:
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
            die_with_requester(request.get("requester"))
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


def parent_death_signal(sig: int) -> None:
    """Linux: this process gets `sig` when the one that forked it dies (best effort)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG


def die_with_requester(requester: int | None) -> None:
    """In a fork told to die with its parent: SIGKILL when the process that asked for it dies (the parent a new
    interpreter would have had), not when the server does (the OOM killer's pick while the requester still waits
    on this child). A daemon thread waits on the requester's pidfd; before Linux 5.3, the server's death signal
    (while the server lives it kills this child when the requester's connection closes)."""
    try:
        watched = os.pidfd_open(requester)
    except ProcessLookupError:  # it died while this child was being made
        os.kill(os.getpid(), signal.SIGKILL)
    except (AttributeError, TypeError, OSError):
        parent_death_signal(signal.SIGKILL)
        return
    threading.Thread(target=_die_when_ready, args=(watched,), name="dies-with-requester", daemon=True).start()


def _die_when_ready(pidfd: int) -> None:
    select.select([pidfd], [], [])  # readable once that process has ended
    os.kill(os.getpid(), signal.SIGKILL)


def die_with_parent() -> None:
    """A new interpreter's `preexec_fn`: SIGKILL if the process that started it dies without passing a signal
    on (no training left running, holding the run dir, after its supervisor is gone)."""
    parent_death_signal(signal.SIGKILL)
