"""Tracks the best epoch by a monitored metric: a `best/` checkpoint and `best.keras`."""

from __future__ import annotations

import math
from pathlib import Path

from launcher.contract import Hook, Position
from launcher.export.trained import export_model


def improved(value: float, previous: float | None, mode: str) -> bool:
    """Is `value` better than `previous` (None: nothing yet) for mode min or max?"""
    if previous is None:
        return True
    return value < previous if mode == "min" else value > previous


class BestModelHook(Hook):
    """On a new best `monitor` value: save the best checkpoint and export the model."""

    def __init__(self, monitor: str, mode: str, checkpointer=None, model=None, export_path: Path | None = None):
        self.monitor = monitor
        self.mode = mode
        self.checkpointer = checkpointer
        self.model = model
        self.export_path = export_path
        self.best: dict = {}
        self.exported: Path | None = None

    def on_epoch_end(self, position: Position, logs: dict) -> None:
        self._consider(position, logs, position.ended_epoch)

    def on_validation(self, position: Position, logs: dict) -> None:
        self._consider(position, logs, position.epoch)  # inside the epoch in progress

    def _consider(self, position: Position, logs: dict, epoch: int) -> None:
        value = logs.get(self.monitor)
        if value is None or not math.isfinite(value):
            return
        if not improved(float(value), self.best.get("value"), self.mode):
            return
        self.best = {
            "monitor": self.monitor,
            "mode": self.mode,
            "value": float(value),
            "epoch": epoch,
            "global_step": position.global_step,
        }
        if self.checkpointer is not None:
            self.checkpointer.save_best(position)
        if self.model is not None and self.export_path is not None:
            try:
                export_model(self.model, self.export_path)
            except OSError as err:  # a full disk: training goes on, the best checkpoint is kept; the finish says
                self.exported = None
                print(
                    f"WARNING: {self.export_path.name} not written ({err.strerror or err}); training goes on, the best "
                    "checkpoint is kept.",
                    flush=True,
                )
                return
            self.exported = self.export_path

    def state(self) -> dict:
        return {"best": self.best}

    def load_state(self, state: dict) -> None:
        """The best so far, unless it was kept by another metric or direction (checkpoint.monitor changed when the
        run continued): then the best starts over from this launch's epochs."""
        best = dict(state.get("best") or {})
        same = best.get("monitor") == self.monitor and best.get("mode", self.mode) == self.mode
        self.best = best if same else {}
