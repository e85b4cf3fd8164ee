"""How a fit ends: every stop says its own status, exit code, failure kind, tags and message, so the runner's
one `except` records any of them. No TensorFlow, no subprocess."""

from __future__ import annotations

import signal

import pytest

from launcher.contract import TIME_BUDGET, EndsLaunch, Position, Preempted, StopContext, ending_of
from launcher.launch.checkpointer import CheckpointWriteError
from launcher.outcome import CHECKPOINT_WRITE, FAILED, FINISHED, KILLED, NUMERICS_STOP, TRAINING_FAILURE
from launcher.train.numerics import NumericsStop

AT = Position(epoch=1, step_in_epoch=3, global_step=13)
REQUEUES = StopContext(requeue_signal=signal.SIGUSR1, max_time="1m30s")


def test_the_time_budget_finishes_the_launch_with_exit_0_and_says_how_to_continue():
    ending = ending_of(Preempted(TIME_BUDGET, AT), StopContext(max_time="1m30s"))
    assert (ending.status, ending.exit_code, ending.stop_reason, ending.error) == (FINISHED, 0, "max_time", None)
    assert ending.tags == {"stop_reason": "max_time", "stop_position": str(AT)}
    assert "train.max_time=1m30s reached at epoch 2, step 3 (global step 13)" in ending.message
    assert not ending.requeue and not ending.to_stderr


def test_a_signal_kills_the_run_with_128_plus_the_signal_and_no_requeue():
    ending = ending_of(Preempted(signal.SIGTERM, AT), REQUEUES)
    assert (ending.status, ending.exit_code, ending.failure) == (KILLED, 143, None)
    assert ending.error == f"stopped by signal {int(signal.SIGTERM)} at {AT}"
    assert ending.message.endswith("Checkpoint saved; re-run the same command to resume.")
    assert ending.tags == {} and not ending.requeue


def test_slurm_s_warning_requeues_only_where_the_context_says_so(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    requeued = ending_of(Preempted(signal.SIGUSR1, AT), REQUEUES)
    assert requeued.requeue and requeued.tags == {"slurm.requeue": "4242"}
    assert requeued.message.endswith("Checkpoint saved; Slurm requeues the job.")
    assert requeued.exit_code == 128 + signal.SIGUSR1
    on_a_worker = ending_of(Preempted(signal.SIGUSR1, AT), StopContext())
    assert not on_a_worker.requeue and on_a_worker.tags == {}


def test_a_numerics_stop_fails_with_its_diagnosis_and_no_traceback():
    stop = NumericsStop("nonfinite_loss", 17, "loss was nan at step 17; try a lower learning rate")
    ending = ending_of(stop, StopContext())
    assert (ending.status, ending.exit_code, ending.failure) == (FAILED, 1, NUMERICS_STOP)
    assert ending.error == "NumericsStop: nonfinite_loss at global step 17"
    assert ending.tags["numerics.stop"] == "nonfinite_loss" and ending.tags["numerics.stop_step"] == "17"
    assert ending.tags["error"] == ending.error
    assert ending.message.startswith("\nloss was nan at step 17") and ending.to_stderr and not ending.traceback


def test_a_failed_checkpoint_write_fails_with_its_message_and_no_traceback():
    ending = ending_of(CheckpointWriteError("checkpoint ckpt-3 not written: No space left on device"), StopContext())
    assert (ending.status, ending.failure) == (FAILED, CHECKPOINT_WRITE)
    assert ending.error == "CheckpointWriteError: checkpoint ckpt-3 not written: No space left on device"
    assert ending.message.endswith("The MLflow run is marked FAILED.") and not ending.traceback


def test_any_other_exception_is_a_training_failure_with_its_traceback(capsys):
    try:
        raise RuntimeError("boom")
    except RuntimeError as err:
        ending = ending_of(err, StopContext())
        ending.announce()
    assert (ending.status, ending.exit_code, ending.failure) == (FAILED, 1, TRAINING_FAILURE)
    assert ending.error == "RuntimeError: boom" and ending.tags == {"error": "RuntimeError: boom"}
    err_text = capsys.readouterr().err
    assert "Traceback" in err_text and err_text.rstrip().endswith("Training failed; the MLflow run is marked FAILED.")


def test_ctrl_c_marks_the_run_killed_and_goes_on_up():
    ending = ending_of(KeyboardInterrupt(), StopContext())
    assert (ending.status, ending.reraise, ending.error) == (KILLED, True, None)


@pytest.mark.parametrize(
    "stop",
    [Preempted(signal.SIGTERM, AT), NumericsStop("skipped_steps", 3, "x"), CheckpointWriteError("disk")],
)
def test_every_stop_the_engine_raises_says_its_own_ending(stop):
    assert isinstance(stop, EndsLaunch)


def test_an_unexpected_exception_does_not_claim_to_say_its_ending():
    assert not isinstance(RuntimeError("boom"), EndsLaunch)
