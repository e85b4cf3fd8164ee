"""Preemption: SIGTERM / SIGINT (and SIGUSR1 with strategy.slurm_requeue) stop training at the next step
boundary, after a save.

`PreemptionGuard` turns the first signal into a request; `CheckpointHook` saves on it and
`PreemptionHook`, last in the list, raises `Preempted` so the training launch marks the run KILLED
and exits 128 + signal.

A process the launcher started (a restart supervisor's attempt, a local worker) acts on the first signal only:
its parent passes the person's signal on once and answers a second one with SIGKILL, so a repeat here is the same
signal arriving twice (Slurm, like systemd, signals every process of the job step: the parent's copy follows).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

from launcher.contract import Hook, Position, Preempted


class PreemptionGuard:
    """While active, SIGTERM/SIGINT only set a flag; training saves and stops at the next step boundary.

    A second signal falls through to the previous handler (Ctrl-C twice still kills), unless `escalates` is False:
    in a process whose parent escalates (it SIGKILLs on the person's second signal), a repeat is ignored.
    """

    def __init__(self, enabled: bool = True, extra_signals: tuple[int, ...] = (), escalates: bool = True):
        self.enabled = enabled
        self.escalates = escalates
        self.signals = (signal.SIGTERM, signal.SIGINT, *extra_signals)  # SIGUSR1: Slurm's time-limit warning
        self.received: int | None = None  # set by the handler, at any moment
        self.finishing = False  # training is over: the exports and the summary run, no step boundary is left
        self.agreed: int | None = None  # what every worker saw at the last boundary (multi-worker)
        self.agree = None  # multi-worker: callable(received) -> the signal any worker received, or None
        self._previous: dict[int, object] = {}

    @property
    def signum(self) -> int | None:
        """The stop in force: under multi-worker only what all workers agreed on at a boundary."""
        return self.received if self.agree is None else self.agreed

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def request(self, signum: int) -> None:
        """A stop asked by the launcher itself (train.max_time: TIME_BUDGET), handled as a signal is."""
        if self.received is None:
            self.received = signum

    def synchronize(self) -> None:
        """Multi-worker: every worker learns whether any of them was signalled (the same step for all)."""
        if self.agree is not None and self.agreed is None:
            self.agreed = self.agree(self.received)

    def _handle(self, signum, frame):
        name = signal.Signals(signum).name
        if self.received is None:
            self.received = signum
            then = (
                "training is done; the exports finish first (a second signal stops them)"
                if self.finishing
                else "saving at the next step boundary, then stopping"
            )
            print(f"\nSignal {name}: {then}.", flush=True)
            return
        if self.escalates and signum in (signal.SIGTERM, signal.SIGINT):
            previous = self._previous.get(signum)
            if callable(previous):
                previous(signum, frame)
            raise KeyboardInterrupt
        # The same stop again (Slurm signals a step's every process, a parent passes it on): it is already on.
        print(f"\nSignal {name} again: already stopping.", flush=True)

    def __enter__(self):
        if self.enabled and threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        # Stopping on a signal, a process whose parent escalates goes on ignoring the stop's signals while it ends
        # its run: a copy passed on late must not kill it before its run is marked and its job requeued.
        stopping = not self.escalates and self.received in self.signals
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_IGN if stopping else handler)
        return False


class StopAgreementHook(Hook):
    """First in a multi-worker job's list: at every boundary the workers agree whether to stop, so a signal
    that reached one worker (or reached them between different steps) stops them all at the same step."""

    def __init__(self, guard: PreemptionGuard):
        self.guard = guard

    def after_steps(self, position: Position, logs: dict) -> None:
        self.guard.synchronize()

    def on_epoch_end(self, position: Position, logs: dict) -> None:
        self.guard.synchronize()


class PreemptionHook(Hook):
    """Stops training once a stop was requested. Last in the list: the save and the metrics
    of that boundary happen first."""

    def __init__(self, guard: PreemptionGuard, steps_in: Callable[[Position], int]):
        """`steps_in(position)`: how many steps its epoch trains (the last is partial under train.max_steps)."""
        self.guard = guard
        self.steps_in = steps_in

    def after_steps(self, position: Position, logs: dict) -> None:
        # On the epoch's last step the stop waits for the epoch end (evaluation, save, metrics).
        if self.guard.requested and position.step_in_epoch < self.steps_in(position):
            raise Preempted(self.guard.signum, position)

    def on_epoch_end(self, position: Position, logs: dict) -> None:
        if self.guard.requested:
            raise Preempted(self.guard.signum, position)
