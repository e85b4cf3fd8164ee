"""Sends each epoch's metrics to MLflow in one batch, after the epoch's checkpoint is saved.

Logging after the save means a kill in between loses metrics MLflow never got, but not the
record of them: the sidecar's history has them, and `load_state` re-logs what is missing.
"""

from __future__ import annotations

from launcher.contract import Hook, Position


class MetricsHook(Hook):
    def __init__(self, tracker, val_by_step: bool = False):
        """`val_by_step` (train.val_every_steps): val_* are logged by global step, from inside epochs and at their
        ends alike, so each val_* curve has one x axis."""
        self.tracker = tracker
        self.val_by_step = val_by_step
        self.healed = 0
        self._validated_at: int | None = None  # the global step of the last validation inside an epoch

    def on_epoch_end(self, position: Position, logs: dict) -> None:
        # By epoch (the x axis of epoch charts); `global_step` lets a chart put them on the step axis.
        logs = {**logs, "global_step": position.global_step}
        if position.global_step == self._validated_at:  # training stopped at that validation: its val_* are logged
            logs = {k: v for k, v in logs.items() if not k.startswith("val_")}
        self._log(logs, position.ended_epoch, position.global_step)
        self.tracker.flush()  # the epoch's record is in MLflow before the next epoch starts

    def on_validation(self, position: Position, logs: dict) -> None:
        self.tracker.log_metrics({k: v for k, v in logs.items() if k.startswith("val_")}, step=position.global_step)
        self._validated_at = position.global_step
        self.tracker.flush()

    def _log(self, logs: dict, epoch: int, global_step: int | None) -> None:
        if not self.val_by_step or global_step is None:
            self.tracker.log_metrics(logs, step=epoch)
            return
        self.tracker.log_metrics({k: v for k, v in logs.items() if not k.startswith("val_")}, step=epoch)
        self.tracker.log_metrics({k: v for k, v in logs.items() if k.startswith("val_")}, step=global_step)

    def state(self) -> dict:
        return {"mlflow_run_id": self.tracker.run_id}

    def load_state(self, state: dict) -> None:
        """Re-log the epochs the checkpoint's history has but MLflow does not."""
        logged = self.tracker.logged_steps("loss")
        missing = [entry for entry in state.get("history") or [] if entry["epoch"] not in logged]
        for entry in missing:
            logs = {k: v for k, v in entry.items() if k != "epoch"}
            self._log(logs, entry["epoch"], entry.get("global_step"))
        self.healed = len(missing)
