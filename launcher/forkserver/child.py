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
import resource
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


class ThreadPools:
    """The BLAS and OpenMP libraries the server loaded (threadpoolctl's controllers, made once, in the server, after
    its imports) and the threads each chose, loading with no limit set, on the server's CPUs: its default. A forked
    child sets each to what it would have chosen loading in a new interpreter under the child's limits and CPUs."""

    def __init__(self):
        self.controller = threadpoolctl.ThreadpoolController()
        self.defaults = {lib.filepath: lib.num_threads for lib in self.controller.lib_controllers}
        self.cpus = len(os.sched_getaffinity(0))

    def chosen(self, env: dict, cpus: int) -> dict[str, int]:
        """The threads each library (by its file) would choose loading under `env` on `cpus` CPUs: the first limit
        it reads that is set (OpenBLAS takes at most its default), else its default. A default of one thread per
        CPU follows the CPUs; another (MKL's physical cores, BLIS's one) is at most one per CPU."""
        chosen = {}
        for lib in self.controller.lib_controllers:
            default = self.defaults[lib.filepath]
            default = cpus if default == self.cpus else min(default, cpus)
            limits = [_threads(env.get(key, "")) for key in THREAD_LIMITS.get(lib.internal_api, ())]
            limit = next((n for n in limits if n), None)
            if limit is None:
                chosen[lib.filepath] = default
            else:
                chosen[lib.filepath] = min(limit, default) if lib.internal_api == "openblas" else limit
        return chosen

    def apply(self, env: dict) -> None:
        """In the fork (its CPU affinity set): each library's threads as a new interpreter's would be."""
        chosen = self.chosen(env, len(os.sched_getaffinity(0)))
        for lib in self.controller.lib_controllers:
            if lib.num_threads != chosen[lib.filepath]:
                lib.set_num_threads(chosen[lib.filepath])


def _threads(value: str) -> int | None:
    """A thread limit as the libraries read it: the leading number (of a list, the first), when above 0."""
    digits = value.strip().split(",")[0]
    return int(digits) if digits.isdigit() and int(digits) > 0 else None


def _as_inherited(inherits: dict | None) -> None:
    """What a new interpreter would have inherited from the requester (`alike.inherited`; the server refused what
    it cannot give): its CPU affinity, resource limits and umask. None: a requester that sent none."""
    if not inherits:
        return
    if set(inherits["affinity"]) != os.sched_getaffinity(0):
        os.sched_setaffinity(0, inherits["affinity"])
    for name, (soft, hard) in inherits["rlimits"].items():
        limit = getattr(resource, name)
        if resource.getrlimit(limit) != (soft, hard):
            resource.setrlimit(limit, (soft, hard))
    os.umask(inherits["umask"])


def become_launcher(request: dict, pools: ThreadPools, fds: list[int], inherited: list[int], started: int) -> None:
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
        _as_inherited(request.get("inherits"))
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
        pools.apply(request["env"])
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
