"""`train.max_time`: a launch's training-time budget.

It counts from the start of training (the first step's compile included), not from the process's start: a 15 s
start-up (TensorFlow's import, the data, the build, the Plan's measurements) must not eat a short budget. Past it,
at the first step boundary (or epoch end), the hook asks the preemption guard for a stop: the checkpoint hook saves
there and the run ends FINISHED with `stop_reason=max_time` (exit 0); the same command again resumes with a new
budget. First in the hook list, before the workers' stop agreement, so every worker of a multi-worker job stops at
the same step. (`train.max_steps` needs no hook: the schedule makes the last epoch shorter.)
"""

from __future__ import annotations

import time
from collections.abc import Callable

from launcher.contract import TIME_BUDGET, Hook, Position


class TimeBudgetHook(Hook):
    def __init__(self, seconds: float, guard, clock: Callable[[], float] = time.monotonic):
        self.seconds = seconds
        self.guard = guard
        self.clock = clock
        self.started: float | None = None

    def on_train_begin(self, position: Position, callbacks) -> None:
        self.started = self.clock()

    def after_steps(self, position: Position, logs: dict) -> None:
        self._check()

    def on_epoch_end(self, position: Position, logs: dict) -> None:
        self._check()

    def _check(self) -> None:
        if self.started is not None and self.clock() - self.started >= self.seconds:
            self.guard.request(TIME_BUDGET)
