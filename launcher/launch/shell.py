"""The one shell around every mode that runs in a run dir (train, eval, predict, doctor).

It quiets TensorFlow's log noise, holds the run dir's lock from before the first write to after
outcome.json, keeps what the launch prints in the run dir's `console.log` (refusals and tracebacks too), turns a
refusal into exit 2 and a crash into exit 1 (with the traceback), and writes the mode's typed outcome record once.
A mode is a function returning its `OutcomeRecord`.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

from launcher.config.errors import ConfigError
from launcher.console import load_tensorflow_quietly, quiet_tensorflow_logs, transcript
from launcher.files import CONSOLE_FILE, OUTCOME_FILE
from launcher.launch.lock import CheckpointDirLock, RunDirBusy, RunDirLock
from launcher.outcome import EXIT_FAILED, EXIT_REFUSED, FAILED, REFUSED, TRAINING_FAILURE, OutcomeRecord


def run_in_shell(
    body: Callable[[], OutcomeRecord],
    run_dir: Path,
    mode: str,
    tf_logs: bool | None = False,
    first_pass: Callable[[], None] | None = None,
    checkpoints: Path | None = None,
) -> int:
    """Run `body` locked in `run_dir` (and in `checkpoints`, a checkpoint directory outside it); write its outcome
    record; return the process's exit code. `first_pass` checks what it can before TensorFlow loads: a refusal it
    raises costs no TensorFlow import. `tf_logs` True shows TensorFlow's logs; None: the body never needs
    TensorFlow (it is not loaded)."""
    quiet_tensorflow_logs(bool(tf_logs), load=False)

    def whole() -> OutcomeRecord:
        if first_pass is not None:
            first_pass()
        if tf_logs is False:
            load_tensorflow_quietly()
        return body()

    try:
        with RunDirLock(run_dir), CheckpointDirLock(checkpoints) if checkpoints else nullcontext():
            with transcript(run_dir / CONSOLE_FILE):
                record = _guarded(whole, mode)
            try:
                if _writes_record(record, run_dir):
                    record.write(run_dir)
            except OSError as err:  # a full disk: the record is what sweeps and supervisors read, so this failed
                print(
                    f"\nERROR: {OUTCOME_FILE} could not be written in {run_dir} ({err.strerror or err}); the launch "
                    f"ended {record.status}. Free space and run the same command again.",
                    file=sys.stderr,
                    flush=True,
                )
                return record.exit_code or EXIT_FAILED
            return record.exit_code
    except RunDirBusy as err:  # another launch owns the run dir: write nothing there
        print(f"\n{err}\n", file=sys.stderr, flush=True)
        return EXIT_REFUSED


def _writes_record(record: OutcomeRecord, run_dir: Path) -> bool:
    """Whether this launch's record replaces the run dir's: not an explain (nothing ran), and neither a refusal nor
    another mode (the doctor under the same name) where the run's training finished (it stays the finished run that
    eval, init_from and a rerun find; the launch is in its console.log)."""
    if record.explained:
        return False
    if record.status == REFUSED or record.mode != "train":
        earlier = OutcomeRecord.read(run_dir)
        if earlier is not None and earlier.finished_training:
            print(f"The run's own record ({OUTCOME_FILE}: its training finished) is kept.", file=sys.stderr, flush=True)
            return False
    return True


def _guarded(body: Callable[[], OutcomeRecord], mode: str) -> OutcomeRecord:
    try:
        return body()
    except ConfigError as err:
        print(f"\n{err}\n", file=sys.stderr, flush=True)
        return OutcomeRecord(status=REFUSED, exit_code=EXIT_REFUSED, error=str(err), mode=mode)
    except Exception as err:
        traceback.print_exc()
        print(f"\n{mode} failed.", file=sys.stderr, flush=True)
        error = f"{type(err).__name__}: {err}"
        return OutcomeRecord(status=FAILED, exit_code=EXIT_FAILED, error=error, mode=mode, failure=TRAINING_FAILURE)
