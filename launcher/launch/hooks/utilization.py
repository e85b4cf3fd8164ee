"""Adds model FLOPs utilisation and time to first step to the epoch metrics."""

from __future__ import annotations

from collections.abc import Callable

from launcher.contract import Hook, Position


class UtilizationHook(Hook):
    """`flops_per_example` x examples/s over `peak_flops` per epoch; the process age at the end
    of the first chunk of steps, once (after a resume: this process's own first step)."""

    def __init__(self, flops_per_example: float, peak_flops: float, clock: Callable[[], float | None]):
        self.flops_per_example = flops_per_example
        self.peak_flops = peak_flops
        self.clock = clock
        self.time_to_first_step: float | None = None
        self._reported = False

    def after_steps(self, position: Position, logs: dict) -> None:
        if self.time_to_first_step is None:
            self.time_to_first_step = self.clock()

    def on_epoch_end(self, position: Position, logs: dict) -> None:
        if self.flops_per_example and self.peak_flops:
            logs["model_flops_utilization"] = logs["examples_per_sec"] * self.flops_per_example / self.peak_flops
        if self.time_to_first_step is not None and not self._reported:
            logs["time_to_first_step_sec"] = self.time_to_first_step
            self._reported = True
