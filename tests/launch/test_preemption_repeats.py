"""A signal that reaches a process twice: Slurm signals every process of a job step, and the supervisor (or the
local-workers launch) passes the same signal on. A process a parent started acts on the first copy only, and a copy
that comes late, while it ends its run, cannot kill it; a process the person signals still escalates.

The guard: `launcher.launch.hooks.preemption.PreemptionGuard`; end to end under Slurm: test_slurm_requeue.py.
"""

from __future__ import annotations

import os
import signal

import pytest

from launcher.launch.hooks.preemption import PreemptionGuard

STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


@pytest.fixture
def handlers_kept():
    """The test process's own handlers, back after the test whatever the guard left."""
    kept = {sig: signal.getsignal(sig) for sig in STOPS}
    yield
    for sig, handler in kept.items():
        signal.signal(sig, handler)


def test_a_process_a_parent_started_acts_on_the_first_copy_and_ignores_the_rest_until_it_ends(capsys, handlers_kept):
    with PreemptionGuard(extra_signals=(signal.SIGUSR1,), escalates=False) as guard:
        os.kill(os.getpid(), signal.SIGTERM)  # Slurm's
        os.kill(os.getpid(), signal.SIGTERM)  # the supervisor's copy: no KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGUSR1)
    assert guard.signum == signal.SIGTERM
    out = capsys.readouterr().out
    assert out.count("Signal SIGTERM: saving") == 1
    assert out.count("Signal SIGTERM again: already stopping") == 1 and "Signal SIGUSR1 again" in out
    # Ending its run (MLflow, the requeue): a copy passed on late is ignored rather than killing the process.
    assert [signal.getsignal(sig) for sig in STOPS] == [signal.SIG_IGN] * 3


def test_a_process_the_person_signals_escalates_and_gets_its_handlers_back(handlers_kept):
    before = [signal.getsignal(sig) for sig in STOPS]
    with pytest.raises(KeyboardInterrupt), PreemptionGuard(extra_signals=(signal.SIGUSR1,)) as guard:
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR1)  # a warning repeated: still one stop
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while stopping: now
    assert guard.signum == signal.SIGUSR1
    assert [signal.getsignal(sig) for sig in STOPS] == before
    with PreemptionGuard(escalates=False):  # nothing received: nothing to ignore afterwards
        pass
    assert [signal.getsignal(sig) for sig in STOPS] == before


def test_a_signal_after_training_says_the_exports_finish_first_not_a_step_boundary_there_is_not(capsys, handlers_kept):
    """Before: SIGTERM during the export said "saving at the next step boundary", which never came."""
    with PreemptionGuard() as guard:
        guard.finishing = True
        os.kill(os.getpid(), signal.SIGTERM)
    out = capsys.readouterr().out
    assert "Signal SIGTERM: training is done; the exports finish first (a second signal stops them)." in out
    assert "step boundary" not in out
