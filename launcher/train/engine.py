"""One training loop for every strategy, precision and XLA mode.

`model.fit` fails under MirroredStrategy + jit_compile and under MultiWorkerMirroredStrategy, so the engine owns
the loop: it trains epoch by epoch in chunks of `steps_per_execution` steps (the compiled steps and chunk loops of
the Plan's step kind: `launcher.train.steps`), reads each chunk's summed stats (`launcher.train.step_stats`), the
task's metric results (Keras metric objects, summed over replicas, see `launcher.train.tasks`) and its numerics
telemetry (skipped steps, the unscaled gradient norm, the loss scale per step, the first non-finite loss), which
`NumericsGuard` reads to stop a collapsing run with a diagnosis, and evaluates a split. Standard Keras callbacks
are driven through `CallbackList`; the launcher's own work around the steps (checkpoints, tracking,
preemption...) is a `launcher.contract.HookList`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import keras
import tensorflow as tf

from launcher import background
from launcher.console import readable
from launcher.contract import EpochResult, FitResult, Hook, Position, headline
from launcher.train.callbacks import VALIDATION_CALLBACKS
from launcher.train.ema import ema_weights
from launcher.train.fresh_optimizer import inner_optimizer
from launcher.train.loss_scale import current_scale
from launcher.train.numerics import ChunkTelemetry, NumericsGuard, NumericsStop
from launcher.train.progress import LiveBar
from launcher.train.step_stats import Totals
from launcher.train.steps import Steps


@dataclass(frozen=True)
class EngineSettings:
    """How an engine runs its loops, beside what it trains (the built model, the Plan, the data)."""

    seed: int = 0  # the data's order: epoch e is shuffled with a seed from it and e alone
    shuffle_buffer: int = 10_000
    callbacks: Sequence = ()  # standard Keras callbacks, driven through a CallbackList
    verbose: int = 1  # 0: no progress bar, no epoch lines
    guard: NumericsGuard | None = None  # stops a collapsing run with a diagnosis (default: the guard's defaults)
    telemetry: bool = True  # False: no gradient norm, no per-step trace (the guard still runs)
    freezer: Any = None  # model.freeze: which layers train in which epoch (launcher.train.fine_tune.Freezer)
    # False: no validation at epoch ends (the step timing of tune=auto, where only the train step matters and
    # tracing the evaluation would cost each candidate ~0.5 s, ~1 s under XLA)
    validate: bool = True


class Engine:
    """The training and evaluation loops of one built model under its strategy, driven by the Plan's step kind.

    `fit` trains epoch by epoch in chunks of steps, asking the hooks where chunks must end (checkpoints,
    step metrics, the profiler window) and telling them after each chunk and epoch; `evaluate` runs a split.
    """

    def __init__(self, built, plan, source, settings: EngineSettings | None = None):
        settings = settings or EngineSettings()
        self.strategy = built.strategy
        self.model = built.model
        self.optimizer = built.optimizer
        self.plan = plan
        self.source = source
        self.seed = settings.seed
        self.shuffle_buffer = settings.shuffle_buffer
        self.verbose = settings.verbose
        self.global_batch = plan.batch.global_batch
        self.accumulate = int(plan.batch.accumulation)
        self.guard = settings.guard or NumericsGuard()
        self.telemetry = settings.telemetry
        self.freezer = settings.freezer
        self.validate = settings.validate
        self.validate_every = plan.schedule.val_every_steps or 0  # train.val_every_steps (0: epoch ends only)
        # Validations so far under train.val_every_steps, inside epochs and at their ends: the index the validation-
        # driven callbacks are given (from 1: Keras's early stopping never stops at its "epoch" 0).
        self._validations = 0
        self._validated: tuple[int, dict] | None = None  # (global step, logs) of the last validation inside an epoch
        # (epoch, step in epoch, iterator) where the last fit stopped inside an epoch: a fit from that very position
        # continues the iterator instead of rebuilding the pipeline (tune=auto's rounds stop and start every ~0.3 s).
        self._paused: tuple[int, int, object] | None = None
        # Carried across chunks (and epochs): consecutive skipped steps, steps at the scale's floor.
        self._streaks = (0, 0)
        self.task = built.task
        self.loss_fn = self.task.per_example_loss  # (y, outputs, sample_weight) -> float32 loss per example
        self._build_functions()
        self._stepped = False
        # Callbacks such as ReduceLROnPlateau reach the optimizer through the model.
        self.model.optimizer = self.optimizer
        self.callbacks = keras.callbacks.CallbackList(
            list(settings.callbacks),
            add_history=True,
            add_progbar=False,
            model=self.model,
            epochs=None,
            steps=plan.schedule.steps_per_epoch,
            verbose=0,
        )

    def _build_functions(self):
        """The step kind's chunk functions for the trainable variables now (again when a freeze changes them)."""
        self._steps = Steps(
            self.strategy,
            self.model,
            self.optimizer,
            self.task,
            kind=self.plan.step.kind,
            accumulate=self.accumulate,
            guard=self.guard,
            telemetry=self.telemetry,
        )
        self._train_chunk, self._eval_chunk = self._steps.train_chunk, self._steps.eval_chunk

    # -------------------------------------------------------------- data

    def _batches(self, split: str, epoch: int, skip: int = 0):
        train = split == "train"
        drop = self.plan.batch.drop_remainder if train else False
        # Seed per epoch: the order of epoch e does not depend on earlier epochs, and
        # skipping the batches already trained on puts a resumed run at the same example.
        seed = self.seed * 100_003 + epoch if train else None
        if train and skip and self.plan.file_sharded:
            # Each worker reads its own files and a step takes its share of the global batch from them.
            share = self.global_batch // len(self.plan.cluster.workers)
            return self.source.pipeline(
                split, self.global_batch, drop, seed, self.shuffle_buffer, skip_examples=skip * share
            )
        return self.source.pipeline(split, self.global_batch, drop, seed, self.shuffle_buffer, skip=skip)

    def batch_at(self, position: Position):
        """The global batch the training step after `position` reads, on the host (a replay sees what it saw)."""
        return next(iter(self._batches("train", position.epoch, skip=position.step_in_epoch)))

    def _iterator(self, split: str, epoch: int, skip: int = 0):
        return self._distributed(self._batches(split, epoch, skip), by_file=split == "train" and self.plan.file_sharded)

    def _distributed(self, ds, by_file: bool = False):
        """An iterator over `ds` across the strategy's replicas: every worker reads the same batches and keeps its
        replicas' slice of each, or (multi-worker training data in enough files, see plan.sharding) its own files."""
        policy = tf.data.experimental.AutoShardPolicy.FILE if by_file else tf.data.experimental.AutoShardPolicy.DATA
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = policy
        return iter(self.strategy.experimental_distribute_dataset(ds.with_options(options)))

    # --------------------------------------------------------------- fit

    def fit(self, epochs: int, start: Position | None = None, hooks: Hook | None = None) -> FitResult:
        """Train from `start` (a resumed position) to the end of epoch `epochs`."""
        hooks = hooks or Hook()
        position = start or Position()
        result = FitResult()
        self.model.stop_training = False
        self.callbacks.on_train_begin()
        hooks.on_train_begin(position, self.callbacks)
        for epoch in range(position.epoch, epochs):
            if self.plan.schedule.reached_max_steps(position):
                break
            position.epoch = epoch
            if self.freezer is not None and self.freezer.set_for(epoch, position.step_in_epoch):
                self._build_functions()  # another set of trainable variables: the step is traced again
                self._stepped = False  # its first step compiles again: kept out of the epoch's throughput too
            self.callbacks.on_epoch_begin(epoch)
            logs = self._train_epoch(position, hooks)
            finished = position.step_in_epoch >= self.plan.schedule.steps_in_epoch(position)
            if finished:
                position.epoch, position.step_in_epoch = epoch + 1, 0
            # else training stopped inside the epoch (a validation's early stop or pruning, a callback): the position
            # stays where it stopped, so the epoch's checkpoint resumes there, not at an epoch it did not finish.
            validated = self._validation_at(position)
            if validated is not None:
                logs.update(validated)
            elif self.validate:
                logs.update(self._validation())
            self._epoch_end_callbacks(epoch, logs, validated is not None)
            result.epochs.append(EpochResult(epoch, logs))  # hooks below may add to logs
            try:
                hooks.on_epoch_end(position, logs)  # may add metrics (utilisation), may stop (preemption)
            finally:
                if self.verbose:
                    print(_epoch_line(epoch, epochs, logs, self.task.train_metrics), flush=True)
            if self.model.stop_training:
                result.stopped_early = not finished or epoch + 1 < epochs
                break
        self.callbacks.on_train_end(result.final)
        hooks.on_train_end(position)
        return result

    def _train_epoch(self, position: Position, hooks: Hook) -> dict[str, float]:
        steps = self.plan.schedule.steps_in_epoch(position)  # the last epoch is partial under train.max_steps
        chunk = self.plan.step.steps_per_execution
        first = position.step_in_epoch
        paused, self._paused = self._paused, None
        if paused is not None and paused[:2] == (position.epoch, first):
            iterator = paused[2]
        else:
            iterator = self._iterator("train", position.epoch, skip=first)
            if paused is not None:
                stale, paused = [paused[2]], None
                _drop_aside(stale)
        del paused
        # On a terminal, the steps' progress until the epoch line replaces it (launcher.train.progress).
        bar = LiveBar.on_terminal(steps, ["loss", *(m.name for m in self.task.train_metrics)], self.verbose)
        totals = Totals()
        for metric in self.task.train_metrics:
            metric.reset_state()
        metric_logs: dict[str, float] = {}
        self._skipped_in_epoch = 0
        compiling = Totals()  # the step that traced and compiled, kept out of the epoch's throughput
        compile_sec = validating_sec = 0.0  # the validations inside the epoch are not training either
        start = time.perf_counter()
        while position.step_in_epoch < steps:
            done = position.step_in_epoch
            n = min(chunk, steps - done)
            until_boundary = hooks.steps_until_boundary(position)
            if until_boundary:
                n = min(n, until_boundary)
            if self.validate_every:  # a chunk ends at each validation
                n = min(n, self.validate_every - position.global_step % self.validate_every)
            first = not self._stepped
            if first:
                n = 1  # the first call traces and compiles; one step makes time-to-first-step honest
                self._stepped = True
            self.callbacks.on_train_batch_begin(done)
            chunk_start = time.perf_counter()
            telemetry, chunk_totals, metric_logs = self._run_chunk(iterator, n, position.global_step + 1)
            if first:
                compiling, compile_sec = chunk_totals, time.perf_counter() - chunk_start
            totals = totals + chunk_totals
            position.step_in_epoch += telemetry.ran
            position.global_step += telemetry.ran
            # The chunk's mean loss; the task's metrics so far this epoch.
            logs = {"loss": chunk_totals.loss, **metric_logs, "examples": chunk_totals.examples, "telemetry": telemetry}
            try:
                self.guard.check(telemetry)
            except NumericsStop as stop:
                hooks.on_numerics_stop(position, logs, stop)  # before any save: nothing non-finite is kept
                raise
            running = {"loss": totals.loss, **metric_logs}
            self.callbacks.on_train_batch_end(position.step_in_epoch - 1, running)
            if bar is not None:
                bar.show(position.step_in_epoch, running)
            if (
                self.validate_every
                and position.global_step % self.validate_every == 0
                and position.step_in_epoch < steps
            ):
                validating = time.perf_counter()
                if bar is not None:
                    bar.erase()  # the validation's line (and a callback's) on a line of its own
                self._validate_inside_epoch(position, hooks)  # the epoch's last step validates at the epoch end
                validating_sec += time.perf_counter() - validating
            hooks.after_steps(position, logs)
            if self.model.stop_training:
                break
        elapsed = time.perf_counter() - start
        if bar is not None:
            bar.erase()
        if position.step_in_epoch < steps:  # stopped inside the epoch: a fit from here continues this iterator
            self._paused = (position.epoch, position.step_in_epoch, iterator)
        else:
            spent, iterator = [iterator], None
            _drop_aside(spent)
        logs = {"loss": totals.loss, **metric_logs, "skipped_steps": float(self._skipped_in_epoch)}
        if totals.finite_norms:
            logs["grad_norm"] = totals.grad_norm
        training_sec = elapsed - validating_sec
        logs["examples_per_sec"] = steady_rate(totals.examples, training_sec, compiling.examples, compile_sec)
        logs["epoch_time_sec"] = elapsed
        return logs

    def _validation(self) -> dict[str, float]:
        """The val_* metrics and, before any callback changes it, the learning rate (and loss scale)."""
        return {**self.evaluate(), **optimizer_logs(self.optimizer)}

    def _validation_at(self, position: Position) -> dict[str, float] | None:
        """The validation inside the epoch at this very step, if one ran (it stopped training there): the epoch's
        end takes it rather than validating the same weights again."""
        if self._validated is None or self._validated[0] != position.global_step:
            return None
        return dict(self._validated[1])

    def _epoch_end_callbacks(self, epoch: int, logs: dict[str, float], validated: bool) -> None:
        """Every callback's epoch end. Under train.val_every_steps the validation-driven ones (early stopping, the LR
        plateau rule) count validations: a new one is given its index, one they saw inside the epoch is not given
        again, so their counters tick once per validation."""
        every = self.callbacks.callbacks
        driven = [c for c in every if isinstance(c, VALIDATION_CALLBACKS)]
        if not self.validate_every or not driven:
            self.callbacks.on_epoch_end(epoch, logs)
            return
        if not validated:
            self._validations += 1
            for callback in driven:
                callback.on_epoch_end(self._validations, logs)
        self.callbacks.callbacks = [c for c in every if c not in driven]
        try:
            self.callbacks.on_epoch_end(epoch, logs)  # through the list: its pending batch-end calls finish first
        finally:
            self.callbacks.callbacks = every

    def _validate_inside_epoch(self, position: Position, hooks: Hook) -> None:
        """train.val_every_steps: evaluate, then let the validation-driven callbacks (early stopping, the LR plateau
        rule) and the hooks (best model, metrics) see it, before the chunk's checkpoint holds their state."""
        logs = self._validation()
        self._validated = (position.global_step, logs)
        self._validations += 1
        for callback in self.callbacks.callbacks:
            if isinstance(callback, VALIDATION_CALLBACKS):
                callback.on_epoch_end(self._validations, logs)
        hooks.on_validation(position, logs)
        if self.verbose:
            shown = " ".join(f"{k}={readable(v)}" for k, v in logs.items() if k.startswith("val_"))
            print(f"  step {position.global_step}: {shown}", flush=True)

    def _run_chunk(self, iterator, n: int, first_step: int) -> tuple[ChunkTelemetry, Totals, dict]:
        out = self._train_chunk(iterator, tf.constant(n, tf.int32), *(tf.constant(v) for v in self._streaks))
        metrics = {k: float(v.numpy()) for k, v in out.pop("metrics").items()}
        out = {k: v.numpy() for k, v in out.items()}
        self._streaks = (int(out["skip_streak"]), int(out["floor_streak"]))
        totals = Totals.of(out["totals"])
        bad_at = int(out["bad_at"])
        telemetry = ChunkTelemetry(
            first_step=first_step,
            ran=int(out["ran"]),
            skipped=int(out["skipped"]),
            skip_streak=self._streaks[0],
            floor_streak=self._streaks[1],
            grad_norm=totals.grad_norm,
            nonfinite_loss_step=first_step + bad_at if bad_at >= 0 else None,
            nonfinite_loss_value=float(out["bad_loss"]),
            losses=out["losses"].tolist(),
            scales=out["scales"].tolist(),
            skips=out["skips"].tolist(),
            grads_finite=out["grads_finite"].tolist(),
        )
        self._skipped_in_epoch += telemetry.skipped
        return telemetry, totals, metrics

    def evaluate(self, split: str = "val") -> dict[str, float]:
        """Metrics of a split (every example, in order), of the weights' moving average under optimizer.use_ema;
        keys prefixed with the split (`val_loss`, `train_accuracy`)."""

        if split == "val":
            steps = self.plan.schedule.validation_steps
        else:
            steps = -(-self.source.size(split) // self.global_batch)
        for metric in self.task.val_metrics:
            metric.reset_state()
        # Every example in order: no shuffle, no dropped remainder (the train split's too).
        iterator = self._distributed(self.source.pipeline(split, self.global_batch, False, None, self.shuffle_buffer))
        with ema_weights(self.model, self.optimizer):
            totals, metrics = self._eval_chunk(iterator, tf.constant(steps, tf.int32))
        spent, iterator = [iterator], None
        _drop_aside(spent)
        logs = {"loss": Totals.of(totals.numpy()).loss, **{k: float(v.numpy()) for k, v in metrics.items()}}
        return {f"{split}_{k}": v for k, v in logs.items()}


def _drop_aside(holder: list) -> None:
    """Drop the iterator in `holder`, its last reference (the caller holds no other), on a thread of its own.

    Dropping a tf.data iterator whose autotuning runs can block its thread for up to ~1.5 s (the transformer LM,
    AMD EPYC: 0.5-1.1 s of a 4 s epoch at 3 of 5 epoch ends), without holding Python's lock: on its own thread
    the next epoch starts meanwhile (benchmarks/epoch_boundary.py). The entry point waits for it before the process
    ends (`launcher.background`)."""
    background.start(holder.clear, "launcher-drop-iterator")


def optimizer_logs(optimizer) -> dict[str, float]:
    """The learning rate the last step took and, under loss scaling, the loss scale now (one read of each)."""
    logs = {"learning_rate": last_step_rate(optimizer)}
    scale = current_scale(optimizer)
    if scale is not None:
        logs["loss_scale"] = scale
    return logs


def last_step_rate(optimizer) -> float:
    """The learning rate the last step took. A schedule read at `iterations` gives the next step's: at an epoch's
    end, the next epoch's (after train.unfreeze_at_epoch, the unfrozen phase's rate for an epoch that trained at
    the frozen phase's); so a schedule is read at the step before. A rate that is a variable is as it is."""
    inner = inner_optimizer(optimizer)  # a loss-scale optimizer's rate is its inner optimizer's
    schedule = getattr(inner, "_learning_rate", None)  # Keras keeps the schedule itself there
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return float(keras.ops.convert_to_numpy(schedule(keras.ops.maximum(inner.iterations - 1, 0))))
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


def _epoch_line(epoch: int, epochs: int, logs: dict[str, float], metrics) -> str:
    parts = [f"{k}={readable(logs[k])}" for k in headline(m.name for m in metrics) if k in logs]
    return f"  epoch {epoch + 1}/{epochs}: " + " ".join(parts)


def steady_rate(examples: float, elapsed: float, compiled_examples: float, compile_sec: float) -> float:
    """Examples per second of an epoch without the step that compiled (epoch 1's rate was mostly the compile),
    unless that step was all the epoch ran."""
    steady_examples, steady_sec = examples - compiled_examples, elapsed - compile_sec
    if steady_examples > 0 and steady_sec > 0:
        return steady_examples / steady_sec
    return examples / elapsed if elapsed > 0 else 0.0
