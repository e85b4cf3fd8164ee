"""The metric points an MLflow run already holds, so a launch that continues the run logs each (key, step) once.

A launch that continues a run trains steps an earlier launch may have logged: one killed after logging past its
last checkpoint resumes from that checkpoint, one killed before its first checkpoint starts over in the same run
(`succession`'s ADOPT), and both train those steps again. MLflow cannot delete a point, so the continuing launch
leaves out the (key, step) pairs the run holds: each curve keeps one point per step, the earlier launch's (the same
value under deterministic=true). Points a key did not have at that step are logged as usual.
"""

from __future__ import annotations

from launcher.tracking.client import with_retry

# MLflow's own system-metrics monitor logs these (not through the launch's tracker): their history is not read.
NOT_LOGGED_BY_THE_LAUNCH = ("system/",)


class HeldPoints:
    """For each metric key, the steps the run held when this launch continued it."""

    def __init__(self, steps: dict[str, set[int]] | None = None):
        self.steps = steps or {}

    @classmethod
    def of_run(cls, client, run_id: str) -> HeldPoints:
        """Read once, before training: one history per key the run has (never per point logged)."""
        keys = with_retry(client.get_run, run_id).data.metrics
        return cls(
            {
                key: {point.step for point in with_retry(client.get_metric_history, run_id, key)}
                for key in keys
                if not key.startswith(NOT_LOGGED_BY_THE_LAUNCH)
            }
        )

    def new(self, metrics: dict[str, float], step: int) -> dict[str, float]:
        """The points of `metrics` at `step` the run does not hold yet."""
        return {key: value for key, value in metrics.items() if step not in self.steps.get(key, ())}
