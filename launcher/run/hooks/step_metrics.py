"""Per-step curves in MLflow: `step/*` metrics by global step, every `tracking.step_metrics_every` steps.

Epoch points are too coarse to see a loss-scale collapse or a divergence after warmup. Chunks of
steps end at multiples of the interval (on every worker alike), and each point is the mean over
the interval's steps of what the chunks already returned to the host, plus the learning rate and
loss scale read once per point: no device sync per step. The tracker queues the write, so the
step loop never waits for MLflow.
"""

from __future__ import annotations

from collections.abc import Callable

from launcher.contract import Hook, Position

PREFIX = "step/"
AVERAGED = ("loss", "accuracy")


class StepMetricsHook(Hook):
    def __init__(self, tracker, every: int, read_optimizer: Callable[[], dict[str, float]]):
        self.tracker = tracker
        self.every = every
        self.read_optimizer = read_optimizer
        self._sums = dict.fromkeys(AVERAGED, 0.0)
        self._examples = 0.0

    def steps_until_boundary(self, position: Position) -> int | None:
        return self.every - position.global_step % self.every

    def after_steps(self, position: Position, logs: dict) -> None:
        examples = logs.get("examples", 0.0)
        for key in AVERAGED:
            self._sums[key] += logs.get(key, 0.0) * examples
        self._examples += examples
        if position.global_step % self.every:
            return
        if self.tracker.run_id is not None:  # a worker that does not log still cuts its chunks here
            point = {f"{PREFIX}{k}": s / self._examples for k, s in self._sums.items()} if self._examples else {}
            point.update({f"{PREFIX}{k}": v for k, v in self.read_optimizer().items()})
            self.tracker.log_metrics(point, step=position.global_step)
        self._sums = dict.fromkeys(AVERAGED, 0.0)
        self._examples = 0.0
