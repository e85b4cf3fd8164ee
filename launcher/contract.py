"""The engine's contract: where training is, what it asks of its hooks, what it returns.

A leaf that imports no TensorFlow, so the checkpoint policy, the hooks' pure logic, the
sweep and the tests can use it without starting a runtime. The engine (train/engine.py)
drives a `HookList`; each hook does one job (launch/hooks/), as Keras's `CallbackList` and
Orbit's actions do. Adding behaviour around the steps means adding a `Hook`, not editing one.

How a fit ends is part of the contract too: every stop the engine (or a hook) raises says its own
`Ending` (status, exit code, failure kind, tags, message), so the training launch (`launcher.launch.training`)
handles them all in one place.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

# Statuses as MLflow names a run's end.
FINISHED, FAILED, KILLED = "FINISHED", "FAILED", "KILLED"

# What a FAILED launch failed at. Only a training failure may be restarted (`train.max_restarts`): the others would
# fail the same way again (the numerics, the disk) or are the person's to fix (refusals have their own status).
TRAINING_FAILURE, NUMERICS_STOP, CHECKPOINT_WRITE = "training", "numerics", "checkpoint_write"
EXPORT_FAILURE = "export"  # training done, a requested export not written: a rerun of the same command only exports

EXIT_FINISHED = 0
EXIT_FAILED = 1  # training (or an examination) failed; also Hydra's own compose errors


def exit_for_signal(signum: int) -> int:
    """128 + the signal, as a shell reports a process the signal ended (130 SIGINT, 143 SIGTERM)."""
    return 128 + signum


# The epoch metrics a person compares runs by (console summary, sweep table), in reading order.
SUMMARY_METRICS = ("loss", "accuracy", "val_loss", "val_accuracy", "examples_per_sec")


def headline(
    names: Iterable[str],
    run_metrics: tuple[str, ...] = ("learning_rate", "loss_scale", "examples_per_sec", "model_flops_utilization"),
) -> list[str]:
    """The loss and the task's metrics (`names`), then their validation values, then `run_metrics`."""
    names = [n for n in names if n != "loss"]
    return ["loss", *names, "val_loss", *(f"val_{n}" for n in names), *run_metrics]


@dataclass
class Position:
    """Where training is. The data position inside the epoch is part of it (exact resume).

    `epoch` is the 0-based epoch in progress (after an epoch ends: the epochs finished);
    `step_in_epoch` counts the batches of that epoch already trained on.
    """

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0

    def __str__(self) -> str:
        return f"epoch {self.epoch + 1}, step {self.step_in_epoch} (global step {self.global_step})"

    @property
    def ended_epoch(self) -> int:
        """At an epoch end: the 0-based epoch that ended. The position is at the start of the next one, or, when
        training stopped inside the epoch (an early stop or pruning at a validation), still where it stopped."""
        return self.epoch if self.step_in_epoch else self.epoch - 1


class Hook:
    """One job around the training steps. Every method is a no-op by default.

    Order of calls in one fit: `load_state` (when resuming) and `on_train_begin`; per chunk
    of steps `steps_until_boundary` (may shorten the chunk), `on_validation` when the chunk ends at a validation
    inside the epoch, then `after_steps`; per epoch
    `on_epoch_end` (may add to `logs`, may raise `Preempted`); finally `on_train_end`. A chunk whose
    numerics stop the run gets `on_numerics_stop` instead of `after_steps` (nothing is saved after it).
    `state()` is what the hook needs back after a resume; the checkpoint hook stores the
    merged state of the list beside every checkpoint.
    """

    def on_train_begin(self, position: Position, callbacks) -> None:
        """Training starts at `position`; `callbacks` is the engine's Keras CallbackList."""

    def steps_until_boundary(self, position: Position) -> int | None:
        """Steps the engine may run before this hook needs control (a save, a trace window).

        Must be the same on every worker of a multi-worker job: chunks that end at different
        steps on different workers deadlock the collectives (measured: the profiler's window,
        cut on the chief only, hung a two-worker run).
        """
        return None

    def after_steps(self, position: Position, logs: dict) -> None:
        """A chunk of steps ended at `position`; `logs` holds the chunk's mean `loss`, the task's metrics
        over the epoch so far (e.g. `accuracy`),
        its number of `examples` and its `telemetry` (`launcher.train.numerics.ChunkTelemetry`: skipped
        steps, gradient norm, per-step loss and loss scale), all already on the host: reading them costs
        nothing."""

    def on_numerics_stop(self, position: Position, logs: dict, stop: Exception) -> None:
        """The chunk ending at `position` (its `logs` as in `after_steps`) stops the run: `stop` is the
        `NumericsStop` with the diagnosis. Record what explains it; the engine raises it next."""

    def on_validation(self, position: Position, logs: dict) -> None:
        """A validation inside an epoch (train.val_every_steps) at `position`, before that chunk's `after_steps`:
        `logs` holds the val_* metrics and the learning rate. Epoch-end validations come with `on_epoch_end`."""

    def on_epoch_end(self, position: Position, logs: dict) -> None:
        """The epoch ended (evaluated); `position` is at the start of the next one, or where training stopped inside
        it (`position.ended_epoch` is the epoch either way). A stop at a validation inside the epoch is not validated
        again: `logs` carry that validation's val_*, which `on_validation` had at the same position."""

    def on_train_end(self, position: Position) -> None:
        """The last epoch ended, or training stopped early."""

    def state(self) -> dict:
        return {}

    def load_state(self, state: dict) -> None:
        """Take back what `state()` returned before the interruption."""


class HookList(Hook):
    """Calls its hooks in order; the chunk boundary is the nearest any hook asks for."""

    def __init__(self, hooks: Iterable[Hook] = ()):
        self.hooks = list(hooks)

    def on_train_begin(self, position: Position, callbacks) -> None:
        for hook in self.hooks:
            hook.on_train_begin(position, callbacks)

    def steps_until_boundary(self, position: Position) -> int | None:
        wanted = (hook.steps_until_boundary(position) for hook in self.hooks)
        return min((n for n in wanted if n), default=None)

    def after_steps(self, position: Position, logs: dict) -> None:
        for hook in self.hooks:
            hook.after_steps(position, logs)

    def on_numerics_stop(self, position: Position, logs: dict, stop: Exception) -> None:
        for hook in self.hooks:
            hook.on_numerics_stop(position, logs, stop)

    def on_validation(self, position: Position, logs: dict) -> None:
        for hook in self.hooks:
            hook.on_validation(position, logs)

    def on_epoch_end(self, position: Position, logs: dict) -> None:
        for hook in self.hooks:
            hook.on_epoch_end(position, logs)

    def on_train_end(self, position: Position) -> None:
        for hook in self.hooks:
            hook.on_train_end(position)

    def state(self) -> dict:
        merged: dict = {}
        for hook in self.hooks:
            merged.update(hook.state())
        return merged

    def load_state(self, state: dict) -> None:
        for hook in self.hooks:
            hook.load_state(state)


# The stop `train.max_time` requests, as the signal number the preemption path (and the workers' agreement on a
# stop) carries: no real signal is negative.
TIME_BUDGET = -1


class Preempted(Exception):
    """Training stopped at a step boundary because the process was asked to stop (a signal, or its time budget)."""

    def __init__(self, signum: int, position: Position):
        why = "train.max_time" if signum == TIME_BUDGET else f"signal {signum}"
        super().__init__(f"stopped by {why} at {position}")
        self.signum = signum
        self.position = position

    @property
    def by_budget(self) -> bool:
        return self.signum == TIME_BUDGET

    def ending(self, context: StopContext) -> Ending:
        """train.max_time: a planned end of this launch, FINISHED; a signal: KILLED, exit 128 + signal (and, for
        strategy.slurm_requeue's signal on the chief, the job requeued)."""
        if self.by_budget:
            return Ending(
                FINISHED,
                EXIT_FINISHED,
                stop_reason="max_time",
                tags={"stop_reason": "max_time", "stop_position": str(self.position)},
                message=f"\ntrain.max_time={context.max_time} reached at {self.position}. Checkpoint saved; run the "
                "same command again to continue.",
            )
        requeue = context.requeue_signal is not None and self.signum == context.requeue_signal
        then = "Slurm requeues the job" if requeue else "re-run the same command to resume"
        return Ending(
            KILLED,
            exit_for_signal(self.signum),
            error=str(self),
            tags={"slurm.requeue": os.environ.get("SLURM_JOB_ID", "")} if requeue else {},
            message=f"\nPreempted: {self}. Checkpoint saved; {then}.",
            requeue=requeue,
        )


@dataclass
class EpochResult:
    epoch: int
    logs: dict[str, float]


@dataclass
class FitResult:
    """The epochs this launch trained; `earlier`: those a resumed run trained before it (from its checkpoint), so
    a launch that resumes with nothing left to train still reports the run's final metrics and history."""

    epochs: list[EpochResult] = field(default_factory=list)
    stopped_early: bool = False
    earlier: list[EpochResult] = field(default_factory=list)

    @property
    def history(self) -> list[EpochResult]:
        """Every epoch of the run, the resumed ones first."""
        return [*self.earlier, *self.epochs]

    @property
    def final(self) -> dict[str, float]:
        history = self.history
        return history[-1].logs if history else {}


# ------------------------------------------------------------------ how a fit ends


@dataclass(frozen=True)
class Ending:
    """How one fit ended: the MLflow run's status, the process's exit code, what failed (for outcome.json and
    the `error` tag) and what the console says about it."""

    status: str
    exit_code: int
    error: str | None = None
    failure: str | None = None  # TRAINING_FAILURE, NUMERICS_STOP, CHECKPOINT_WRITE or EXPORT_FAILURE, when FAILED
    stop_reason: str | None = None  # a finished fit: epochs, max_steps, early_stopping, pruned or max_time
    tags: dict = field(default_factory=dict)
    message: str = ""
    to_stderr: bool = False
    traceback: bool = False  # an unexpected failure: its traceback is what explains it
    requeue: bool = False  # strategy.slurm_requeue: the chief asks Slurm to requeue the job once the run is ended
    reraise: bool = False  # Ctrl-C (or an exit) goes on up once the run is ended

    def announce(self) -> None:
        """Print what the person needs to know (inside the `except`, so a traceback is the one being handled)."""
        if self.traceback:
            traceback.print_exc()
        if self.message:
            print(self.message, file=sys.stderr if self.to_stderr else sys.stdout, flush=True)


@dataclass(frozen=True)
class StopContext:
    """What an ending depends on beyond the stop itself."""

    requeue_signal: int | None = None  # strategy.slurm_requeue on the chief: the signal that requeues the job
    max_time: str = ""  # train.max_time, as the console shows it


@runtime_checkable
class EndsLaunch(Protocol):
    """A stop that says how it ends the launch: `Preempted`, `NumericsStop`, `CheckpointWriteError`, `ExportFailed`."""

    def ending(self, context: StopContext) -> Ending: ...


def ending_of(err: BaseException, context: StopContext) -> Ending:
    """The ending of a fit that raised `err`: its own when it says one, else a training failure (Ctrl-C: KILLED)."""
    if isinstance(err, EndsLaunch):
        return err.ending(context)
    if isinstance(err, KeyboardInterrupt):
        return Ending(KILLED, exit_for_signal(signal.SIGINT), reraise=True)
    if not isinstance(err, Exception):  # SystemExit and the like: not the training's failure
        return Ending(FAILED, EXIT_FAILED, reraise=True)
    error = f"{type(err).__name__}: {err}"
    return Ending(
        FAILED,
        EXIT_FAILED,
        error=error,
        failure=TRAINING_FAILURE,
        tags={"error": error},
        message="\nTraining failed; the MLflow run is marked FAILED.",
        to_stderr=True,
        traceback=True,
    )
