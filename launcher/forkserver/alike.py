"""Which starts a fork makes alike a new interpreter, and which must be cold.

A forked child inherits what the server imported under. A variable read while TensorFlow, Keras, the C libraries
or Python load has the server's value in it, so a start whose value differs is a new interpreter; one read after
the fork (the cluster, the output buffering, the thread limits) may differ freely. Both the requester (routing a
start) and the server (refusing one) ask this module.

Beside its environment, a new interpreter inherits its CPU affinity, resource limits and umask from the process that
starts it: a requester sends its own (`inherited`), the server refuses those it cannot give a fork
(`cannot_inherit`) and the fork takes the others (`child.become_launcher`).
"""

from __future__ import annotations

import os
import resource
import sys

from launcher.console import LOG_LEVEL_DEFAULTS

# Read when TensorFlow, Keras, the C libraries or Python load: a start that changes one is cold. JE_ARROW_ and
# ARROW_: pyarrow's allocator (imported with pandas) reads them as it loads.
IMPORT_TIME_PREFIXES = (
    *("TF_", "KERAS_", "CUDA", "XLA_", "OMP_", "KMP_", "MKL", "OPENBLAS", "PYTHON", "LD_", "LC_", "GRPC_", "ABSL_"),
    *("JE_ARROW_", "ARROW_"),
)
IMPORT_TIME_NAMES = {"HOME", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES", "LANG", "LANGUAGE"}
# Thread limits the BLAS and OpenMP libraries read when they load, each library's in the order it reads them, by
# threadpoolctl's `internal_api` (OpenBLAS falls back to GOTO_NUM_THREADS then OMP_NUM_THREADS; MKL and BLIS to
# OMP_NUM_THREADS). joblib's workers set them, so a parallel sweep's jobs have them. The server loads the libraries
# without any (their defaults) and a forked child sets each library to what it would have chosen loading under the
# child's (`child.ThreadPools`).
THREAD_LIMITS = {
    "openblas": ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"),
    "openmp": ("OMP_NUM_THREADS",),
    "mkl": ("MKL_NUM_THREADS", "OMP_NUM_THREADS"),
    "blis": ("BLIS_NUM_THREADS", "OMP_NUM_THREADS"),
}
THREAD_LIMIT_VARIABLES = sorted({key for keys in THREAD_LIMITS.values() for key in keys})
# Read after the fork: the strategy's cluster, the output buffering (each child's stdio is made new), the thread
# limits (above). KMP_INIT_AT_FORK: joblib sets it when imported (so in a sweep's workers, not in a fresh server);
# only Intel's OpenMP runtime reads it, which TensorFlow's wheels do not load. The CUDA driver reads which GPUs
# it shows, and in what order, at cuInit, when the runtime first lists devices (its "failed call to cuInit" line
# comes then, not at import): submitit's local jobs set CUDA_VISIBLE_DEVICES.
READ_LATER = {
    *("TF_CONFIG", "PYTHONUNBUFFERED", *THREAD_LIMIT_VARIABLES, "KMP_INIT_AT_FORK"),
    *("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"),
}
COLD_ARGS = {"tf_logs=true"}  # TensorFlow's C++ start-up lines come from its import (`cold_overrides`)


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


def cold_overrides(overrides) -> list[str]:
    """The overrides among `overrides` that make a start cold (`COLD_ARGS`), however Hydra would spell them: a
    sweep's jobs are given `tf_logs=True`, a person may write `++tf_logs=TRUE` or `tf_logs='true'`."""
    cold = {arg.partition("=")[0]: arg.partition("=")[2] for arg in COLD_ARGS}
    found = []
    for override in overrides:
        key, _, value = str(override).partition("=")
        if cold.get(key.lstrip("+")) == value.strip("'\" ").lower():
            found.append(str(override))
    return found


def launcher_args(args) -> list[str] | None:
    """The launcher's arguments when `args` is `[sys.executable, "-m", "launcher", ...]`."""
    args = [str(a) for a in args]
    if args[:3] == [sys.executable, "-m", "launcher"]:
        return args[3:]
    return None


# Every resource limit, once (RLIMIT_OFILE is RLIMIT_NOFILE's other name): a new interpreter inherits them all.
RESOURCE_LIMITS = sorted(name for name in dir(resource) if name.startswith("RLIMIT_") and name != "RLIMIT_OFILE")


def inherited() -> dict:
    """What a new interpreter started by this process would inherit besides its environment and descriptors: the
    calling thread's CPU affinity, the resource limits (soft, hard) and the umask."""
    return {
        "affinity": sorted(os.sched_getaffinity(0)),
        "rlimits": {name: list(resource.getrlimit(getattr(resource, name))) for name in RESOURCE_LIMITS},
        "umask": _umask(),
    }


def cannot_inherit(inherits: dict) -> str | None:
    """Why a fork of this process (the server) cannot be given what a requester's new interpreter would inherit
    (`inherited`), or None: a CPU outside this process's affinity or a hard limit above its own (neither can an
    unprivileged process take back), another stack limit (the C library sizes every thread's stack by it when the
    interpreter starts)."""
    if not set(inherits["affinity"]) <= os.sched_getaffinity(0):
        return f"its CPU affinity {inherits['affinity']} is not within the server's"
    for name, (soft, hard) in sorted(inherits["rlimits"].items()):
        own_soft, own_hard = resource.getrlimit(getattr(resource, name))
        if _above(hard, own_hard):
            return f"its hard {name} is above the server's"
        if name == "RLIMIT_STACK" and soft != own_soft:
            return "its RLIMIT_STACK differs from the server's (threads' stacks are sized by it at start)"
    return None


def _above(limit: int, other: int) -> bool:
    """Whether resource limit `limit` is higher than `other` (RLIM_INFINITY above all)."""
    if other == resource.RLIM_INFINITY:
        return False
    return limit == resource.RLIM_INFINITY or limit > other


def _umask() -> int:
    """This process's umask, read without setting it (os.umask would, for a moment, for every thread)."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask
