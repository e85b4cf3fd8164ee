"""The shell's outcome record (`launcher.launch.shell`): a run whose training finished stays finished for eval,
init_from and a rerun, whatever a later launch in its dir does short of training it again."""

from __future__ import annotations

from launcher.config.errors import ConfigError
from launcher.launch.shell import run_in_shell
from launcher.outcome import EXIT_FINISHED, EXIT_REFUSED, FINISHED, OutcomeRecord


def test_a_finished_runs_record_is_kept_through_a_refusal_an_explain_and_a_doctor_and_replaced_by_training(tmp_path):
    OutcomeRecord(FINISHED, EXIT_FINISHED, run_id="trained", stop_reason="epochs").write(tmp_path)

    def refused():
        raise ConfigError.single("model.name", "cnn", "the value this run started with, mlp", "checkpoint.resume=never")

    assert run_in_shell(refused, tmp_path, "train", tf_logs=None) == EXIT_REFUSED
    explained = OutcomeRecord(FINISHED, EXIT_FINISHED, explained=True)
    assert run_in_shell(lambda: explained, tmp_path, "train", tf_logs=None) == EXIT_FINISHED
    doctor = OutcomeRecord(FINISHED, EXIT_FINISHED, run_id="doctor", mode="doctor")
    assert run_in_shell(lambda: doctor, tmp_path, "doctor", tf_logs=None) == EXIT_FINISHED
    kept = OutcomeRecord.read(tmp_path)
    assert kept.run_id == "trained" and kept.finished_training
    again = OutcomeRecord(FINISHED, EXIT_FINISHED, run_id="trained", stop_reason="epochs")
    run_in_shell(lambda: again, tmp_path, "train", tf_logs=None)
    assert OutcomeRecord.read(tmp_path).pid == again.pid  # a training launch's own record replaces it
