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


def test_a_fit_s_outcome_is_one_record_whose_in_process_parts_never_reach_outcome_json(tmp_path):
    """A failed export after training: FAILED with the export's error, the stop reason training ended with, the
    run's final metrics and every epoch's logs (a resumed run's earlier ones too); the Plan, the fit's result and
    the model stay in the process, and the record read back from outcome.json equals it."""
    from launcher.contract import Ending, EpochResult, FitResult
    from launcher.files import OUTCOME_FILE, read_json
    from launcher.outcome import EXPORT_FAILURE, OutcomeRecord

    result = FitResult(epochs=[EpochResult(1, {"loss": 0.5})], earlier=[EpochResult(0, {"loss": 0.9})])
    export_failed = Ending(FAILED, 1, error="export failed: tflite", failure=EXPORT_FAILURE)
    record = OutcomeRecord.of_fit(
        export_failed, result, "epochs", run_id="r1", plan=object(), run_dir=tmp_path, model=object()
    )
    assert (record.status, record.exit_code, record.stop_reason, record.failure) == (
        FAILED,
        1,
        "epochs",
        EXPORT_FAILURE,
    )
    assert record.metrics == {"loss": 0.5} and record.history == [{"loss": 0.9}, {"loss": 0.5}]
    assert record.result is result and record.run_dir == tmp_path
    record.write(tmp_path)
    written = read_json(tmp_path / OUTCOME_FILE, {})
    assert not {"plan", "result", "run_dir", "model"} & set(written)
    assert written["error"] == "export failed: tflite" and written["history"] == record.history
    assert OutcomeRecord.read(tmp_path) == record
    killed = OutcomeRecord.of_fit(ending_of(Preempted(signal.SIGTERM, AT), StopContext()), None, None)
    assert (killed.status, killed.exit_code, killed.metrics, killed.history) == (KILLED, 143, {}, [])


def test_a_requeue_slurm_refuses_adds_why_to_the_ending_s_error(monkeypatch):
    from launcher.launch import stopping

    ending = ending_of(Preempted(signal.SIGUSR1, AT), REQUEUES)
    monkeypatch.setattr(stopping, "requeue", lambda: (True, "requeued"))
    assert stopping.requeue_job(ending) == ending
    monkeypatch.setattr(stopping, "requeue", lambda: (False, "scontrol requeue failed"))
    assert stopping.requeue_job(ending).error == f"{ending.error}; scontrol requeue failed"
