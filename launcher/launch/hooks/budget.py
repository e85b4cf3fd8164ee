"""`train.max_time`: a launch's wall-clock budget.

Past the budget, at the first step boundary (or epoch end), the hook asks the preemption guard for a stop:
the checkpoint hook saves there and the run ends FINISHED with `stop_reason=max_time` (exit 0); the same
command again resumes with a new budget. First in the hook list, before the workers' stop agreement, so
every worker of a multi-worker job stops at the same step. (`train.max_steps` needs no hook: the schedule
makes the last epoch shorter.)
"""

from __future__ import annotations

from collections.abc import Callable

from launcher.contract import TIME_BUDGET, Hook, Position


class TimeBudgetHook(Hook):
    def __init__(self, seconds: float, guard, elapsed: Callable[[], float]):
        """`elapsed()`: the launch's age in seconds."""
        self.seconds = seconds
        self.guard = guard
        self.elapsed = elapsed

    def after_steps(self, position: Position, logs: dict) -> None:
        self._check()

    def on_epoch_end(self, position: Position, logs: dict) -> None:
        self._check()

    def _check(self) -> None:
        if self.elapsed() >= self.seconds:
            self.guard.request(TIME_BUDGET)
