"""One training loop for every strategy, precision and XLA mode.

`model.fit` fails under MirroredStrategy + jit_compile and under
MultiWorkerMirroredStrategy, so the engine owns the loop:

- `graph`:       the replica step is a plain tf.function body;
- `hybrid`:      the same graph step, the optimizer updating through fused TensorFlow
                 kernels (`launcher.train.fused_update`, chosen at build time): oneDNN
                 keeps the matmuls, the update is one pass per variable;
- `fused_xla`:   one replica, the whole step (forward, backward, apply) compiled;
- `replica_xla`: forward/backward compiled *inside* strategy.run, the
                 cross-replica apply outside the compiled function.

Steps run `steps_per_execution` at a time in an in-graph loop; per-replica
loss sums are reduced across replicas and returned to Python once per chunk with the task's
metric results (Keras metric objects, summed over replicas, see `launcher.train.tasks`), with
the chunk's numerics telemetry (skipped steps, the unscaled gradient norm, the loss scale per
step, the first non-finite loss) counted on the device; `NumericsGuard` reads it and
stops a collapsing run with a diagnosis. Standard Keras callbacks are driven through `CallbackList`; the launcher's own
work around the steps (checkpoints, tracking, preemption...) is a `launcher.contract.HookList`.
"""

from __future__ import annotations

import sys
import time
from dataclasses import astuple, dataclass
from types import SimpleNamespace

import keras
import numpy as np
import tensorflow as tf

from launcher.contract import EpochResult, FitResult, Hook, Position, headline
from launcher.train.callbacks import VALIDATION_CALLBACKS
from launcher.train.ema import ema_weights
from launcher.train.loss_scale import current_scale
from launcher.train.numerics import ChunkTelemetry, NumericsGuard, NumericsStop

SUM = tf.distribute.ReduceOp.SUM
# The stats vector of a replica-step, summed across replicas (a vector, so one all-reduce carries it): the
# loss sum and the examples, then (training only) the unscaled gradient norm when finite and the count of
# finite norms. `Totals` reads it by these names on the host.
LOSS_SUM, EXAMPLES, GRAD_NORM_SUM, FINITE_NORMS = range(4)
STATS, TRAIN_STATS = 2, 4


@dataclass
class Totals:
    """A chunk's or an epoch's summed stats vector, by name."""

    loss_sum: float = 0.0
    examples: float = 0.0
    grad_norm_sum: float = 0.0
    finite_norms: float = 0.0

    @classmethod
    def of(cls, vector) -> Totals:
        values = [float(v) for v in np.asarray(vector, dtype=np.float64)]
        return cls(*values, *([0.0] * (TRAIN_STATS - len(values))))

    def __add__(self, other: Totals) -> Totals:
        return Totals(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    @property
    def loss(self) -> float:
        return self.loss_sum / max(self.examples, 1.0)

    @property
    def grad_norm(self) -> float:
        """The mean finite unscaled gradient norm (NaN when no step had one)."""
        return self.grad_norm_sum / self.finite_norms if self.finite_norms else float("nan")


class Engine:
    """The training and evaluation loops of one built model under its strategy, driven by the Plan's step kind.

    `fit` trains epoch by epoch in chunks of steps, asking the hooks where chunks must end (checkpoints,
    step metrics, the profiler window) and telling them after each chunk and epoch; `evaluate` runs a split.
    """

    def __init__(
        self,
        built,
        plan,
        source,
        *,
        seed: int = 0,
        shuffle_buffer: int = 10_000,
        callbacks=(),
        verbose: int = 1,
        guard: NumericsGuard | None = None,
        telemetry: bool = True,
        freezer=None,
    ):
        self.strategy = built.strategy
        self.model = built.model
        self.optimizer = built.optimizer
        self.plan = plan
        self.source = source
        self.seed = seed
        self.shuffle_buffer = shuffle_buffer
        self.verbose = verbose
        self.global_batch = plan.batch.global_batch
        self.accumulate = int(plan.batch.accumulation)
        self.guard = guard or NumericsGuard()
        self.telemetry = telemetry  # False: no gradient norm, no per-step trace (the guard still runs)
        self.freezer = freezer  # model.freeze: which layers train in which epoch (launcher.train.fine_tune)
        self.validate_every = plan.schedule.val_every_steps or 0  # train.val_every_steps (0: epoch ends only)
        self._validations = 0  # validations inside epochs so far (the index the plateau callbacks are given)
        self._scaled = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        # Carried across chunks (and epochs): consecutive skipped steps, steps at the scale's floor.
        self._streaks = (0, 0)
        self.task = built.task
        self.loss_fn = self.task.per_example_loss  # (y, outputs) -> float32 loss per example
        self._build_functions()
        self._stepped = False
        # Callbacks such as ReduceLROnPlateau reach the optimizer through the model.
        self.model.optimizer = self.optimizer
        self.callbacks = keras.callbacks.CallbackList(
            list(callbacks),
            add_history=True,
            add_progbar=False,
            model=self.model,
            epochs=None,
            steps=plan.schedule.steps_per_epoch,
            verbose=0,
        )

    # ------------------------------------------------------------- steps

    def _forward_backward(self, x, y):
        """Scaled gradients of this replica's batch, its stats and outputs; with accumulation, the batch is
        `accumulate` micro-batches, each run forward and backward in turn and their gradients averaged."""
        if self.accumulate == 1:
            grads, stats, outputs = self._micro_step(x, y)
        else:
            grads, stats, outputs = None, None, []
            for x_micro, y_micro in zip(tf.split(x, self.accumulate), tf.split(y, self.accumulate), strict=True):
                micro_grads, micro_stats, micro_outputs = self._micro_step(x_micro, y_micro)
                micro_grads = [tf.convert_to_tensor(g) if g is not None else None for g in micro_grads]
                outputs.append(micro_outputs)
                if grads is None:
                    grads, stats = micro_grads, micro_stats
                else:
                    grads = [a if b is None else a + b for a, b in zip(grads, micro_grads, strict=True)]
                    stats += micro_stats
            grads = [g / self.accumulate if g is not None else None for g in grads]
            outputs = tf.concat(outputs, axis=0)
        return grads, tf.concat([stats, self._grad_telemetry(grads)], axis=0), outputs

    def _micro_step(self, x, y):
        with tf.GradientTape() as tape:
            outputs = self.model(x, training=True)
            per_example = self.loss_fn(y, outputs)
            loss = tf.nn.compute_average_loss(per_example)
            if self.model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(self.model.losses))
            scaled = self.optimizer.scale_loss(loss)
        return tape.gradient(scaled, self.model.trainable_variables), _stats(per_example), outputs

    def _grad_telemetry(self, grads):
        """[norm, 1] for a finite unscaled global gradient norm of this replica's batch, else [0, 0]."""
        if not self.telemetry:
            return tf.zeros([2], tf.float32)
        norm = tf.linalg.global_norm([tf.cast(g, tf.float32) for g in grads if g is not None])
        if self._scaled:
            norm = norm / tf.cast(self.optimizer.dynamic_scale, tf.float32)
        finite = tf.math.is_finite(norm)
        return tf.stack([tf.where(finite, norm, 0.0), tf.cast(finite, tf.float32)])

    def _apply_step(self, x, y):
        grads, stats, outputs = self._forward_backward_fn(x, y)
        self.optimizer.apply(grads, self.model.trainable_variables)
        return stats, outputs

    def _eval_forward(self, x, y):
        outputs = self.model(x, training=False)
        return _stats(self.loss_fn(y, outputs)), outputs

    def _build_functions(self):
        step = self.plan.step.kind
        self._forward_backward_fn = (
            tf.function(self._forward_backward, jit_compile=True) if step == "replica_xla" else self._forward_backward
        )
        task = self.task

        # Metrics are updated in replica context from the outputs the step returns. Under several replicas
        # outside the compiled forward (their on-read variables stay out of XLA, like the cross-replica apply);
        # on one replica (fused_xla) inside the compiled step, which then compiles whole.
        def replica_step(x, y):
            stats, outputs = self._apply_step(x, y)
            task.update(task.train_metrics, y, outputs)
            return stats

        def eval_step(x, y):
            stats, outputs = self._eval_forward(x, y)
            task.update(task.val_metrics, y, outputs)
            return stats

        # The replica functions have no tensor-dependent Python control flow: AutoGraph (which rewrites Python
        # source at trace time, ~2 s of every launch) converts only the two chunk loops (`convert_chunk_loops`).
        replica_step = tf.autograph.experimental.do_not_convert(replica_step)
        eval_step = tf.autograph.experimental.do_not_convert(eval_step)
        if step == "fused_xla":
            replica_step = tf.function(replica_step, jit_compile=True)
            # Multi-replica evaluation keeps every example, so its last batch is ragged and shapes differ per
            # replica; a compiled forward there would be retraced with a relaxed shape that captures one device's
            # variables. Only one replica's evaluation is compiled.
            eval_step = tf.function(eval_step, jit_compile=True)

        self._train_chunk = self._telemetry_loop(replica_step)
        self._eval_chunk = self._eval_loop(eval_step)

    def _eval_loop(self, eval_step):
        """The evaluation chunk: steps in an in-graph loop, the loss sums and the task's metrics."""
        strategy, metrics = self.strategy, self.task.val_metrics

        @tf.function
        def eval_chunk(iterator, steps):
            totals = tf.zeros([STATS], tf.float32)
            for _ in tf.range(steps):
                x, y = next(iterator)
                totals += strategy.reduce(SUM, strategy.run(eval_step, args=(x, y)), axis=None)
            return totals, {m.name: m.result() for m in metrics}

        return eval_chunk

    def _telemetry_loop(self, replica_step):
        """The training chunk: steps in an in-graph loop, numerics counted on the device.

        A step counts as skipped when the optimizer's iteration counter did not move (the loss-scale
        optimizer skipped its non-finite gradients). With on_nonfinite=stop a non-finite loss ends
        the chunk after that step, and so does a streak reaching collapse_steps: the guard on the host
        then stops the run at that exact step.
        """
        strategy, optimizer, metrics = self.strategy, self.optimizer, self.task.train_metrics
        scaled = self._scaled
        min_scale = float(self.guard.min_scale) if self.guard.min_scale is not None else -1.0
        stop_on_nonfinite = self.guard.on_nonfinite == "stop"
        collapse = self.guard.collapse_steps
        trace = self.telemetry
        replicas = float(strategy.num_replicas_in_sync)

        @tf.function
        def train_chunk(iterator, steps, skip_streak, floor_streak):
            totals = tf.zeros([TRAIN_STATS], tf.float32)
            ran, skipped = tf.constant(0), tf.constant(0)
            bad_at, bad_loss = tf.constant(-1), tf.constant(0.0)
            losses = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[])
            scales = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[])
            skips = tf.TensorArray(tf.bool, size=0, dynamic_size=True, element_shape=[])
            grads_ok = tf.TensorArray(tf.bool, size=0, dynamic_size=True, element_shape=[])
            for _ in tf.range(steps):
                before = tf.identity(optimizer.iterations)
                x, y = next(iterator)
                step = strategy.reduce(SUM, strategy.run(replica_step, args=(x, y)), axis=None)
                totals += step
                skipped_now = tf.equal(tf.identity(optimizer.iterations), before)
                skip_streak = tf.where(skipped_now, skip_streak + 1, 0)
                loss = step[LOSS_SUM] / tf.maximum(step[EXAMPLES], 1.0)
                if trace:
                    losses = losses.write(ran, loss)
                    skips = skips.write(ran, skipped_now)
                    grads_ok = grads_ok.write(ran, tf.equal(step[FINITE_NORMS], replicas))
                if scaled:
                    scale = tf.cast(optimizer.dynamic_scale, tf.float32)
                    if trace:
                        scales = scales.write(ran, scale)
                    floor_streak = tf.where(scale <= min_scale, floor_streak + 1, 0)
                ran += 1
                skipped += tf.cast(skipped_now, tf.int32)
                if stop_on_nonfinite and not tf.math.is_finite(loss):
                    bad_at, bad_loss = ran - 1, loss
                    break
                if collapse and (skip_streak >= collapse or floor_streak >= collapse):
                    break  # the guard stops the run at this exact step
            return {
                "totals": totals,
                "ran": ran,
                "skipped": skipped,
                "skip_streak": skip_streak,
                "floor_streak": floor_streak,
                "bad_at": bad_at,
                "bad_loss": bad_loss,
                "losses": losses.stack(),
                "scales": scales.stack(),
                "skips": skips.stack(),
                "grads_finite": grads_ok.stack(),
                "metrics": {m.name: m.result() for m in metrics},
            }

        return train_chunk

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
        ds = self._batches(split, epoch, skip)
        # Every worker reads the same batches and keeps its replicas' slice of each, or (multi-worker training
        # data in enough files, see plan.sharding) reads its own files.
        by_file = split == "train" and self.plan.file_sharded
        policy = tf.data.experimental.AutoShardPolicy.FILE if by_file else tf.data.experimental.AutoShardPolicy.DATA
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = policy
        ds = ds.with_options(options)
        return iter(self.strategy.experimental_distribute_dataset(ds))

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
            if self.freezer is not None and self.freezer.set_for(epoch):
                self._build_functions()  # another set of trainable variables: the step is traced again
            self.callbacks.on_epoch_begin(epoch)
            logs = self._train_epoch(position, epochs, hooks)
            position.epoch, position.step_in_epoch = epoch + 1, 0
            logs.update(self.evaluate())
            logs.update(optimizer_logs(self.optimizer))
            self.callbacks.on_epoch_end(epoch, logs)
            result.epochs.append(EpochResult(epoch, logs))  # hooks below may add to logs
            try:
                hooks.on_epoch_end(position, logs)  # may add metrics (utilisation), may stop (preemption)
            finally:
                if self.verbose:
                    print(_epoch_line(epoch, epochs, logs, self.task.train_metrics), flush=True)
            if self.model.stop_training:
                result.stopped_early = epoch + 1 < epochs
                break
        self.callbacks.on_train_end(result.final)
        hooks.on_train_end(position)
        return result

    def _train_epoch(self, position: Position, epochs: int, hooks: Hook) -> dict[str, float]:
        steps = self.plan.schedule.steps_in_epoch(position)  # the last epoch is partial under train.max_steps
        chunk = self.plan.step.steps_per_execution
        first = position.step_in_epoch
        iterator = self._iterator("train", position.epoch, skip=first)
        # The live bar only on a terminal: in a log file (CI, Slurm) its escape codes are noise, and the
        # epoch line below says the same once.
        live = self.verbose and sys.stdout.isatty()
        bar = keras.utils.Progbar(steps, verbose=self.verbose, unit_name="step") if live else None
        if bar is not None:
            print(f"Epoch {position.epoch + 1}/{epochs}", flush=True)
        totals = Totals()
        for metric in self.task.train_metrics:
            metric.reset_state()
        metric_logs: dict[str, float] = {}
        self._skipped_in_epoch = 0
        start = time.perf_counter()
        while position.step_in_epoch < steps:
            done = position.step_in_epoch
            n = min(chunk, steps - done)
            until_boundary = hooks.steps_until_boundary(position)
            if until_boundary:
                n = min(n, until_boundary)
            if self.validate_every:  # a chunk ends at each validation
                n = min(n, self.validate_every - position.global_step % self.validate_every)
            if not self._stepped:
                n = 1  # the first call traces and compiles; one step makes time-to-first-step honest
                self._stepped = True
            self.callbacks.on_train_batch_begin(done)
            telemetry, chunk_totals, metric_logs = self._run_chunk(iterator, n, position.global_step + 1)
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
                bar.update(
                    position.step_in_epoch, values=list(running.items()), finalize=position.step_in_epoch >= steps
                )
            if (
                self.validate_every
                and position.global_step % self.validate_every == 0
                and position.step_in_epoch < steps
            ):
                self._validate_inside_epoch(position, hooks)  # the epoch's last step validates at the epoch end
            hooks.after_steps(position, logs)
            if self.model.stop_training:
                break
        elapsed = time.perf_counter() - start
        logs = {"loss": totals.loss, **metric_logs, "skipped_steps": float(self._skipped_in_epoch)}
        if totals.finite_norms:
            logs["grad_norm"] = totals.grad_norm
        logs["examples_per_sec"] = totals.examples / elapsed if elapsed > 0 else 0.0
        logs["epoch_time_sec"] = elapsed
        return logs

    def _validate_inside_epoch(self, position: Position, hooks: Hook) -> None:
        """train.val_every_steps: evaluate, then let the validation-driven callbacks (early stopping, the LR plateau
        rule) and the hooks (best model, metrics) see it, before the chunk's checkpoint holds their state."""
        logs = {**self.evaluate(), **optimizer_logs(self.optimizer)}
        self._validations += 1
        for callback in self.callbacks.callbacks:
            if isinstance(callback, VALIDATION_CALLBACKS):
                callback.on_epoch_end(self._validations, logs)
        hooks.on_validation(position, logs)
        if self.verbose:
            shown = " ".join(f"{k}={v:.4g}" for k, v in logs.items() if k.startswith("val_"))
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
        ds = self.source.pipeline(split, self.global_batch, False, None, self.shuffle_buffer)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        iterator = iter(self.strategy.experimental_distribute_dataset(ds.with_options(options)))
        with ema_weights(self.model, self.optimizer):
            totals, metrics = self._eval_chunk(iterator, tf.constant(steps, tf.int32))
        logs = {"loss": Totals.of(totals.numpy()).loss, **{k: float(v.numpy()) for k, v in metrics.items()}}
        return {f"{split}_{k}": v for k, v in logs.items()}


def optimizer_logs(optimizer) -> dict[str, float]:
    """The learning rate and, under loss scaling, the loss scale now (one read of each from the device)."""
    logs = {"learning_rate": float(keras.ops.convert_to_numpy(optimizer.learning_rate))}
    scale = current_scale(optimizer)
    if scale is not None:
        logs["loss_scale"] = scale
    return logs


def _stats(per_example):
    count = tf.cast(tf.shape(per_example)[0], tf.float32)
    return tf.stack([tf.reduce_sum(tf.cast(per_example, tf.float32)), count])


def _epoch_line(epoch: int, epochs: int, logs: dict[str, float], metrics) -> str:
    parts = [f"{k}={logs[k]:.4g}" for k in headline(m.name for m in metrics) if k in logs]
    return f"  epoch {epoch + 1}/{epochs}: " + " ".join(parts)


def convert_chunk_loops() -> None:
    """AutoGraph's rewrite of the two chunk loops (their Python `for`, `if` and `break` into graph control flow),
    done ahead: ~1 CPU-s of source transformation that every process pays on its first trace otherwise.

    AutoGraph keeps a conversion per code object and options, whatever the closure, so a forkserver that calls
    this before it forks spares it every launch it starts. Nothing is traced or run: TensorFlow's runtime is not
    started (a fork after it would be unsafe)."""
    stand_in = SimpleNamespace(
        strategy=SimpleNamespace(num_replicas_in_sync=1),
        optimizer=None,
        task=SimpleNamespace(train_metrics=[], val_metrics=[]),
        _scaled=False,
        guard=SimpleNamespace(min_scale=None, on_nonfinite="stop", collapse_steps=0),
        telemetry=False,
    )
    for loop in (Engine._telemetry_loop(stand_in, None), Engine._eval_loop(stand_in, None)):
        tf.autograph.to_graph(loop.python_function)  # the same options tf.function converts with
