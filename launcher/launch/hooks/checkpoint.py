"""Saves a checkpoint when the save rule says so, or when a stop was requested.

The sidecar state is gathered from the hooks that need something back after a resume
(history, best metric, early-stopping state, MLflow run id), at the moment of the save.
"""

from __future__ import annotations

from collections.abc import Callable

from launcher.contract import Hook, HookList, Position
from launcher.launch.checkpoint_policy import SavePolicy


class CheckpointHook(Hook):
    def __init__(self, checkpointer, policy: SavePolicy, guard, steps_in: Callable[[Position], int], stateful=None):
        """`steps_in(position)`: how many steps its epoch trains (the last is partial under train.max_steps)."""
        self.checkpointer = checkpointer
        self.policy = policy
        self.guard = guard
        self.steps_in = steps_in
        self.stateful = stateful or HookList()
        self._saved_at: int | None = None  # the global step of the last save

    def steps_until_boundary(self, position: Position) -> int | None:
        return self.policy.steps_until_save(position)

    def after_steps(self, position: Position, logs: dict) -> None:
        # A save due on the epoch's last step (or a signal seen there) waits for the epoch end,
        # so the checkpoint holds that epoch's evaluation and history.
        if position.step_in_epoch >= self.steps_in(position):
            return
        if self.guard.requested or self.policy.step_save_due(position):
            self.save(position)  # once, even when a step save and a signal coincide

    def on_epoch_end(self, position: Position, logs: dict) -> None:
        # An epoch training stopped inside (early stopping, pruning) counts as done for the save rule; the save holds
        # the position where it stopped, once (a step save may have been made there already).
        epochs_done = position.ended_epoch + 1
        due = self.policy.epoch_save_due(epochs_done) or self.policy.step_save_due(position) or self.guard.requested
        if due and position.global_step != self._saved_at:
            self.save(position)

    def save(self, position: Position) -> None:
        self.checkpointer.save(position, self.stateful.state())
        self._saved_at = position.global_step
