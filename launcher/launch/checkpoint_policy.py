"""When to save: the checkpoint save rule as pure arithmetic on the position (no TensorFlow).

A save at every global step that is a multiple of `interval_steps` (when > 0) and at the end
of every `interval_epochs`-th epoch (when > 0); either, both or neither may be set.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.contract import Position


@dataclass(frozen=True)
class SavePolicy:
    interval_steps: int = 0
    interval_epochs: int = 1

    @classmethod
    def from_config(cls, checkpoint) -> SavePolicy:
        return cls(checkpoint.interval_steps, checkpoint.interval_epochs)

    def steps_until_save(self, position: Position) -> int | None:
        """Steps from `position` to the next step save (None: no step saves)."""
        if self.interval_steps <= 0:
            return None
        return self.interval_steps - position.global_step % self.interval_steps

    def step_save_due(self, position: Position) -> bool:
        return self.interval_steps > 0 and position.global_step % self.interval_steps == 0

    def epoch_save_due(self, epochs_done: int) -> bool:
        return self.interval_epochs > 0 and epochs_done % self.interval_epochs == 0
