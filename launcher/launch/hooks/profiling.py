"""Traces a window of steps with TensorFlow's profiler; reports after training, not inside it."""

from __future__ import annotations

from launcher.contract import Hook, Position


class ProfilerHook(Hook):
    def __init__(self, profiler, tracker):
        self.profiler = profiler
        self.tracker = tracker

    def steps_until_boundary(self, position: Position) -> int | None:
        return self.profiler.steps_until_boundary(position.global_step)

    def after_steps(self, position: Position, logs: dict) -> None:
        self.profiler.after_steps(position.global_step)

    def on_train_end(self, position: Position) -> None:
        """Close a window cut short by the end of training, then parse and upload the trace:
        doing that inside the loop would land in an epoch's measured time."""
        self.profiler.stop(position.global_step)
        if not self.profiler.traced_steps:
            return
        text = self.profiler.report(
            header=f"Profile of {self.profiler.traced_steps} training step(s), trace in {self.profiler.logdir}"
        )
        print(f"\n{text}", flush=True)
        self.tracker.log_artifacts(self.profiler.logdir, "profile")
