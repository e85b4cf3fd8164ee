"""train.max_restarts: which failures a restart may cure, how long it waits, and the test-only fault that fires
in the first attempts only. The restart of a real killed training is in test_checkpoint (bit-identical)."""

from __future__ import annotations

import os
import signal

import pytest
import warm

from launcher.config.errors import ConfigError
from launcher.launch import faults
from launcher.outcome import (
    CHECKPOINT_WRITE,
    EXIT_FAILED,
    EXIT_REFUSED,
    FAILED,
    KILLED,
    NUMERICS_STOP,
    REFUSED,
    TRAINING_FAILURE,
    OutcomeRecord,
)
from launcher.supervise.restarts import RESTART_ENV, Attempt, backoff_seconds, supervise, why_restart


def failed(failure: str | None) -> OutcomeRecord:
    return OutcomeRecord(status=FAILED, exit_code=EXIT_FAILED, error="RuntimeError: boom", failure=failure)


def test_a_training_failure_and_a_crash_signal_are_restarted():
    assert why_restart(Attempt(EXIT_FAILED, failed(TRAINING_FAILURE))) == "RuntimeError: boom"
    for sig in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT):
        attempt = Attempt.of_process(-sig, None, signalled=False)
        assert attempt.exit_code == 128 + sig
        assert why_restart(attempt) == f"the training process was killed by {sig.name}"


def test_refusals_numerics_a_full_disk_signals_and_success_are_not():
    refused = OutcomeRecord(status=REFUSED, exit_code=EXIT_REFUSED, error="Invalid configuration")
    never = [
        Attempt(0),
        Attempt(EXIT_REFUSED, refused),
        Attempt(EXIT_FAILED, failed(NUMERICS_STOP)),
        Attempt(EXIT_FAILED, failed(CHECKPOINT_WRITE)),
        Attempt(EXIT_FAILED, None),  # exit 1 with no record of this attempt: Hydra refused to compose
        Attempt(143, OutcomeRecord(status=KILLED, exit_code=143)),  # preempted: saved and stopped
        Attempt.of_process(-signal.SIGTERM, None, signalled=False),  # someone asked it to stop
        Attempt.of_process(-signal.SIGKILL, None, signalled=True),  # the person signalled the supervisor
        Attempt(EXIT_FAILED, failed(TRAINING_FAILURE), signalled=True),
    ]
    assert [why_restart(a) for a in never] == [None] * len(never)


def test_backoff_doubles_up_to_ten_minutes():
    assert [backoff_seconds(10, k) for k in (1, 2, 3)] == [10, 20, 40]
    assert backoff_seconds(10, 12) == 600


def test_supervise_runs_until_success_or_the_restarts_are_used(capsys):
    seen = []

    def attempts(results):
        def run(restart, reason):
            seen.append((restart, reason))
            return results[restart]

        return run

    crash = Attempt.of_process(-signal.SIGKILL, None, False)
    assert supervise(attempts([crash, crash, Attempt(0)]), max_restarts=2, backoff=0) == 0
    assert seen == [(0, None), (1, "the training process was killed by SIGKILL")] + [(2, seen[1][1])]
    assert "Restart 2 of 2" in capsys.readouterr().err
    seen.clear()
    assert supervise(attempts([crash, crash]), max_restarts=1, backoff=0) == 128 + signal.SIGKILL
    assert len(seen) == 2 and "Not restarting: train.max_restarts=1" in capsys.readouterr().err
    seen.clear()
    assert supervise(attempts([Attempt(EXIT_FAILED, failed(NUMERICS_STOP))]), max_restarts=3, backoff=0) == 1
    assert len(seen) == 1


def test_a_fault_limited_to_the_first_attempts_fires_only_there(monkeypatch):
    fault = faults.parse("RAISE@steps:3#2")
    assert (fault.step, fault.attempts, fault.describe()) == (3, 2, "RAISE@steps:3#2")
    monkeypatch.setenv(faults.ENV, "RAISE@steps:3#2")
    for restart, fires in (("0", True), ("1", True), ("2", False)):
        monkeypatch.setenv(RESTART_ENV, restart)
        if fires:
            with pytest.raises(faults.InjectedFault):
                faults.fault_point("steps", 3)
        else:
            faults.fault_point("steps", 3)  # returns: the third attempt trains on
    with pytest.raises(ConfigError, match="STEP\\[#ATTEMPTS\\]"):
        faults.parse("RAISE@steps:3#x")


def test_a_refused_config_is_not_restarted(cli):
    done = cli("train.max_restarts=2", "train.restart_backoff=0", "scaling.batch_size=0")
    assert done.returncode == EXIT_REFUSED, done.stderr[-2000:]
    assert "scaling.batch_size" in done.stderr
    assert "Restart" not in done.stderr and done.stderr.count("Invalid configuration") == 1


@pytest.mark.forking  # the launcher's own children: the supervisor's attempts
def test_a_training_exception_is_restarted_and_the_same_run_finishes(cli, tmp_path):
    """The outcome record's failure kind and pid reach the supervisor: an exception (not a signal) restarts."""
    from support.config import TINY

    overrides = [*TINY, "precision=fp32", "xla=false", "train.max_restarts=1", "train.restart_backoff=0"]
    done = cli(*overrides, env={"LAUNCHER_FAULT": "RAISE@steps:3#1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Restart 1 of 1 in 0 s (InjectedFault: LAUNCHER_FAULT: injected failure at steps 3)" in done.stderr
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    assert [r.info.status for r in runs] == ["FINISHED"]
    assert runs[0].data.tags["restart.1.error"].startswith("InjectedFault")
    # The restart was forked by the forkserver the launch was given (the test process's), not a new interpreter
    # nor a server of the supervisor's own: the log levels the supervisor set did not make it differ.
    restarted = OutcomeRecord.read(tmp_path / "run")
    assert restarted is not None and restarted.forked_by is not None
    assert os.environ.get(warm.COLD_ENV) == "1" or restarted.forked_by == warm._server[0].process.pid
