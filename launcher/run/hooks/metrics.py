"""Sends each epoch's metrics to MLflow in one batch, after the epoch's checkpoint is saved.

Logging after the save means a kill in between loses metrics MLflow never got, but not the
record of them: the sidecar's history has them, and `load_state` re-logs what is missing.
"""

from __future__ import annotations

from launcher.contract import Hook, Position


class MetricsHook(Hook):
    def __init__(self, tracker):
        self.tracker = tracker
        self.healed = 0

    def on_epoch_end(self, position: Position, logs: dict) -> None:
        # By epoch (the x axis of epoch charts); `global_step` lets a chart put them on the step axis.
        self.tracker.log_metrics({**logs, "global_step": position.global_step}, step=position.epoch - 1)
        self.tracker.flush()  # the epoch's record is in MLflow before the next epoch starts

    def state(self) -> dict:
        return {"mlflow_run_id": self.tracker.run_id}

    def load_state(self, state: dict) -> None:
        """Re-log the epochs the checkpoint's history has but MLflow does not."""
        logged = self.tracker.logged_steps("loss")
        missing = [entry for entry in state.get("history") or [] if entry["epoch"] not in logged]
        for entry in missing:
            self.tracker.log_metrics({k: v for k, v in entry.items() if k != "epoch"}, step=entry["epoch"])
        self.healed = len(missing)
