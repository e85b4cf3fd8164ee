"""hparams_search pruning: report the objective to the study's trial at each validation; stop when it is pruned.

A pruned trial ends as an early stop does (its checkpoint saved, the run FINISHED, `stop_reason=pruned`), so the
sweep counts it as pruned, never as failed, and a re-run of the sweep skips it.
"""

from __future__ import annotations

from launcher.contract import Hook, Position


class PruningHook(Hook):
    def __init__(self, trial, by_global_step: bool):
        """`trial`: `launcher.launch.trial.Trial`; `by_global_step` (train.val_every_steps): the report's step is the
        global step, else the number of epochs done."""
        self.trial = trial
        self.by_global_step = by_global_step
        self.model = None
        self.pruned_at: tuple[Position, float] | None = None
        self._reported: int | None = None  # the step of the last report: a stop at a validation is not reported twice

    def on_train_begin(self, position: Position, callbacks) -> None:
        self.model = callbacks.model

    def on_validation(self, position: Position, logs: dict) -> None:
        if self.by_global_step:
            self._report(position, logs, position.global_step)

    def on_epoch_end(self, position: Position, logs: dict) -> None:
        self._report(position, logs, position.global_step if self.by_global_step else position.ended_epoch + 1)

    def _report(self, position: Position, logs: dict, step: int) -> None:
        value = logs.get(self.trial.objective) if self.trial.objective else None
        if value is None or self.pruned_at is not None or step == self._reported:
            return
        self.trial.report(float(value), step)
        self._reported = step
        if self.trial.should_prune():
            self.pruned_at = (Position(position.epoch, position.step_in_epoch, position.global_step), float(value))
            print(
                f"\nPruned: trial {self.trial.number}'s {self.trial.objective}={float(value):.4g} at {position} is "
                "not promising (the study's pruner); saving and stopping.",
                flush=True,
            )
            self.model.stop_training = True

    def tags(self, total_steps: int) -> dict[str, str]:
        """Where a pruned trial stopped and the steps its schedule did not run ({} when it was not pruned)."""
        if self.pruned_at is None:
            return {}
        position, value = self.pruned_at
        return {
            "pruned": "true",
            "pruned.epoch": str(position.epoch),
            "pruned.global_step": str(position.global_step),
            "pruned.value": f"{value:.6g}",
            "pruned.steps_saved": str(max(total_steps - position.global_step, 0)),
        }
