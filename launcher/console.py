"""What the console shows: TensorFlow's C++ and absl start-up noise and MLflow's store set-up lines are quieted
by default (tf_logs=true shows everything); and what it showed, kept in the run dir (`transcript`).

A leaf (no launcher imports, no TensorFlow at import time): the entry point calls
`quiet_tensorflow_logs` before TensorFlow loads, and the environment probe and the
runtime wrap their first TensorFlow calls in `quiet_stderr`.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

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
    """Import TensorFlow with its C++ start-up lines swallowed (they bypass every log level).

    A process that imports it here collects no garbage during the import and then freezes what it imported
    (`gc.freeze`, as the forkserver does before it forks): the ~450k objects of TensorFlow, Keras and the launcher
    are never garbage, yet each full collection walked them all (~0.2 CPU-s each, a dozen a cold launch:
    `benchmarks/cold_start_gc.py`). A process that had it already (a test, a fork) keeps its collector as it was."""
    imported_here, collecting = "tensorflow" not in sys.modules, gc.isenabled()
    if imported_here:
        gc.disable()  # the import's own full collections walked the growing heap ten times over (~1.3 CPU-s)
    try:
        with quiet_stderr():
            import tensorflow  # noqa: F401
    finally:
        if imported_here:
            gc.collect()  # once, so that the import's own garbage is freed rather than frozen
            gc.freeze()
            if collecting:
                gc.enable()


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


def readable(value: float) -> str:
    """A number as a person reads it on the console: a count as an integer (359, not 359.0000), a large rate
    rounded with thousands separators (40,760, not 4.076e+04 or 40759.8082), a small one to 4 significant digits."""
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}" if abs(value) >= 10_000 else str(int(value))
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


# Colour and cursor codes (CSI sequences, and OSC ones such as terminal titles): a terminal's, not a file's.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


class _Lines:
    """Console text as a person saw it, line by line: a carriage return or a backspace redraws the line in
    place (Keras's progress bar on a terminal), so only what was left on screen is kept; colour codes dropped."""

    def __init__(self, out):
        self.out = out
        self.line: list[str] = []
        self.returned = False  # a carriage return not yet followed by anything: "\r\n" is a plain newline
        # Re-entrant: a signal handler that prints (the preemption guard) may run while this thread is inside feed.
        self.lock = threading.RLock()
        self.closed = False  # a stream kept past the launch (a handler made during it) writes to the console only

    def feed(self, text: str) -> None:
        with self.lock:
            if self.closed:
                return
            for char in _ESCAPES.sub("", text):
                if char == "\n":
                    self._emit()
                    continue
                if self.returned:
                    self.line.clear()
                    self.returned = False
                if char == "\r":
                    self.returned = True
                elif char == "\b":
                    if self.line:
                        self.line.pop()
                else:
                    self.line.append(char)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            if self.line:
                self._emit()

    def _emit(self) -> None:
        self.out.write("".join(self.line) + "\n")
        self.line.clear()
        self.returned = False


class _Tee:
    """A console stream that also feeds the transcript; a terminal still looks like one (`isatty`)."""

    def __init__(self, stream, lines: _Lines, broken):
        self._stream, self._lines, self._broken = stream, lines, broken

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        try:
            self._lines.feed(text)
        except (OSError, ValueError) as err:  # a full disk (or a closed file) stops the transcript, not the launch
            self._broken(err)
        return written

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


_KEPT: list[_Lines] = []  # the transcript this process keeps now, if any


def keep(text: str) -> None:
    """`text` into the transcript only, not onto the console (what a person reads in the run dir's console.log
    but need not see twice on screen, e.g. a worker's copy of the chief's Plan)."""
    for lines in _KEPT:
        with contextlib.suppress(OSError):
            lines.feed(text if text.endswith("\n") else text + "\n")


@contextlib.contextmanager
def transcript(path: Path):
    """Keep what this process prints (stdout and stderr, as interleaved on screen) in `path` too, appended after a
    header naming the launch: a resumed run's launches follow one another. C++ writes straight to the file
    descriptors (TensorFlow's own log lines) are not in it."""
    try:
        out = open(path, "a", buffering=1, encoding="utf-8", errors="replace")  # noqa: SIM115 (closed below)
    except OSError as err:
        print(f"WARNING: the console is not kept in {path} ({err.strerror or err}).", file=sys.stderr, flush=True)
        yield
        return
    lines = _Lines(out)
    originals = sys.stdout, sys.stderr
    stopped: list[Exception] = []
    tees: tuple = ()

    def broken(err: Exception) -> None:
        if not stopped:
            stopped.append(err)
            lines.closed = True
            if tees and sys.stdout is tees[0] and sys.stderr is tees[1]:
                sys.stdout, sys.stderr = originals
            if lines in _KEPT:
                _KEPT.remove(lines)
            reason = getattr(err, "strerror", None) or err
            print(f"WARNING: the console is no longer kept in {path} ({reason}).", file=originals[1])

    try:
        out.write(f"--- launch of {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, pid {os.getpid()} ---\n")
    except OSError as err:
        broken(err)
    handlers = []
    if not stopped:
        tees = _Tee(originals[0], lines, broken), _Tee(originals[1], lines, broken)
        sys.stdout, sys.stderr = tees
        _KEPT.append(lines)
        handlers = _onto(tees, originals)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = originals
        for handler, stream in handlers:
            with contextlib.suppress(OSError, ValueError):
                handler.setStream(stream)
        if lines in _KEPT:
            _KEPT.remove(lines)
        for stream in originals:
            with contextlib.suppress(OSError, ValueError):  # a console whose reader is gone (a broken pipe)
                stream.flush()
        with contextlib.suppress(OSError, ValueError):
            lines.close()
        with contextlib.suppress(OSError, ValueError):
            out.close()


def _onto(tees, originals) -> list:
    """Python logging's console handlers (Hydra's, set up before the launch with the console streams themselves)
    write through the transcript too; each handler with the stream to give back."""
    moved = []
    for handler in logging.getLogger().handlers:
        stream = getattr(handler, "stream", None)
        if isinstance(handler, logging.StreamHandler) and stream in originals:
            moved.append((handler, stream))
            with contextlib.suppress(OSError, ValueError):
                handler.setStream(tees[originals.index(stream)])
    return moved
