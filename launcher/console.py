"""What the console shows: TensorFlow's C++ and absl start-up noise and MLflow's store set-up lines are quieted
by default (tf_logs=true shows everything).

A leaf (no launcher imports, no TensorFlow at import time): the entry point calls
`quiet_tensorflow_logs` before TensorFlow loads, and the environment probe and the
runtime wrap their first TensorFlow calls in `quiet_stderr`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import warnings

_QUIET = False


def quiet_tracking_logs() -> None:
    """MLflow announces at INFO level that it creates or migrates a new store's tables: every first run's console
    said so, and nothing there is for the person. Warnings and errors still show."""
    for name in ("mlflow.store.db.utils", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


# What a launch sets, unless already set, before it imports TensorFlow (its C++, absl and gRPC log levels).
LOG_LEVEL_DEFAULTS = {"TF_CPP_MIN_LOG_LEVEL": "2", "GRPC_VERBOSITY": "ERROR", "ABSL_MIN_LOG_LEVEL": "2"}


def quiet_tensorflow_logs(enabled: bool, load: bool = True) -> None:
    """Hide TensorFlow's C++/absl start-up noise and MLflow's store set-up lines unless tf_logs=true (must run
    before import); `load`: import TensorFlow now, its start-up lines swallowed (else `load_tensorflow_quietly`
    later, after a check that needs no TensorFlow)."""
    if enabled:
        return
    quiet_tracking_logs()
    for key, value in LOG_LEVEL_DEFAULTS.items():
        os.environ.setdefault(key, value)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    logging.getLogger("absl").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="keras")
    global _QUIET
    _QUIET = True
    if load:
        load_tensorflow_quietly()


def load_tensorflow_quietly() -> None:
    """Import TensorFlow with its C++ start-up lines swallowed (they bypass every log level)."""
    with quiet_stderr():
        import tensorflow  # noqa: F401


@contextlib.contextmanager
def quiet_stderr():
    """Swallow C++ writes to fd 2 (TensorFlow's pre-absl-init lines); replay them on error."""
    if not _QUIET:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            sink.seek(0)
            sys.stderr.write(sink.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
