"""Keeps every epoch's logs: the sidecar carries them, so metrics lost to a kill can be re-logged."""

from __future__ import annotations

from launcher.contract import Hook, Position


class HistoryHook(Hook):
    def __init__(self):
        self.history: list[dict] = []

    def on_epoch_end(self, position: Position, logs: dict) -> None:
        self.history.append({"epoch": position.ended_epoch, "global_step": position.global_step, **logs})

    def state(self) -> dict:
        return {"history": list(self.history)}

    def load_state(self, state: dict) -> None:
        self.history = list(state.get("history") or [])
