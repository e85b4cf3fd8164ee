"""Per-step curves in MLflow: `step/*` metrics by global step, every `tracking.step_metrics_every` steps.

Epoch points are too coarse to see a loss-scale collapse or a divergence after warmup. Chunks of
steps end at multiples of the interval (on every worker alike), and each point is the mean over
the interval's steps of what the chunks already returned to the host (the loss, the unscaled
gradient norm), the task's metrics over the epoch so far (accuracy, auc, ...: what the metric
objects hold at the point), the interval's count of skipped non-finite steps, plus the learning
rate and loss scale read once per point: no device sync per step. When the numerics guard stops
the run, every step since the last point is logged (loss, loss scale, skipped), so the curve
reaches the failing step. The tracker queues the writes, so the step loop never waits for MLflow.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from launcher.contract import Hook, Position

PREFIX = "step/"
AVERAGED = ("loss",)
NOT_METRICS = {"loss", "examples", "telemetry"}


class StepMetricsHook(Hook):
    def __init__(self, tracker, every: int, read_optimizer: Callable[[], dict[str, float]]):
        self.tracker = tracker
        self.every = every
        self.read_optimizer = read_optimizer
        self._reset()

    def _reset(self) -> None:
        self._sums = dict.fromkeys(AVERAGED, 0.0)
        self._latest: dict[str, float] = {}  # the task's metrics, epoch-to-date, at the last chunk
        self._examples = 0.0
        self._grad_norm_sum, self._grad_norm_steps = 0.0, 0  # chunk means weighted by their steps
        self._skipped = 0
        self._trace: list[tuple[int, float, float | None, bool]] = []  # (step, loss, scale, skipped)

    def steps_until_boundary(self, position: Position) -> int | None:
        return self.every - position.global_step % self.every

    def after_steps(self, position: Position, logs: dict) -> None:
        self._add(logs)
        if position.global_step % self.every:
            return
        if self.tracker.run_id is not None:  # a worker that does not log still cuts its chunks here
            self.tracker.log_metrics(self._point(), step=position.global_step)
        self._reset()

    def on_numerics_stop(self, position: Position, logs: dict, stop: Exception) -> None:
        self._add(logs)
        if self.tracker.run_id is None:
            return
        for step, loss, scale, skipped in self._trace:
            point = {f"{PREFIX}loss": loss, f"{PREFIX}skipped": float(skipped)}
            if scale is not None:
                point[f"{PREFIX}loss_scale"] = scale
            self.tracker.log_metrics(point, step=step)  # MLflow stores NaN/inf: the curve shows the failure
        self._reset()

    def _add(self, logs: dict) -> None:
        examples = logs.get("examples", 0.0)
        for key in AVERAGED:
            self._sums[key] += logs.get(key, 0.0) * examples
        self._examples += examples
        self._latest = {k: v for k, v in logs.items() if k not in NOT_METRICS}
        telemetry = logs.get("telemetry")
        if telemetry is None:
            return
        self._skipped += telemetry.skipped
        if math.isfinite(telemetry.grad_norm):
            self._grad_norm_sum += telemetry.grad_norm * telemetry.ran
            self._grad_norm_steps += telemetry.ran
        if not telemetry.losses:  # train.telemetry=false: no per-step trace
            return
        scales = telemetry.scales or [None] * telemetry.ran
        for i, (loss, scale, skipped) in enumerate(zip(telemetry.losses, scales, telemetry.skips, strict=True)):
            self._trace.append((telemetry.first_step + i, loss, scale, skipped))

    def _point(self) -> dict[str, float]:
        point = {f"{PREFIX}{k}": s / self._examples for k, s in self._sums.items()} if self._examples else {}
        point.update({f"{PREFIX}{k}": v for k, v in self._latest.items()})
        point[f"{PREFIX}skipped_steps"] = float(self._skipped)
        if self._grad_norm_steps:
            point[f"{PREFIX}grad_norm"] = self._grad_norm_sum / self._grad_norm_steps
        point.update({f"{PREFIX}{k}": v for k, v in self.read_optimizer().items()})
        return point
