"""Which starts a fork makes alike a new interpreter, and which must be cold.

A forked child inherits what the server imported under. A variable read while TensorFlow, Keras, the C libraries
or Python load has the server's value in it, so a start whose value differs is a new interpreter; one read after
the fork (the cluster, the output buffering, the thread limits) may differ freely. Both the requester (routing a
start) and the server (refusing one) ask this module.
"""

from __future__ import annotations

import sys

from launcher.console import LOG_LEVEL_DEFAULTS

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


def launcher_args(args) -> list[str] | None:
    """The launcher's arguments when `args` is `[sys.executable, "-m", "launcher", ...]`."""
    args = [str(a) for a in args]
    if args[:3] == [sys.executable, "-m", "launcher"]:
        return args[3:]
    return None
