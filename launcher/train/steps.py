"""What a Plan's step kind traces and compiles: the replica steps and the in-graph loops that run a chunk of them.

`model.fit` fails under MirroredStrategy + jit_compile and under MultiWorkerMirroredStrategy, so the launcher
builds its own steps, one set per step kind:

- `graph`:       the replica step is a plain tf.function body;
- `hybrid`:      the same graph step, the optimizer updating through fused TensorFlow
                 kernels (`launcher.train.fused_update`, chosen at build time): oneDNN
                 keeps the matmuls, the update is one pass per variable;
- `fused_xla`:   one replica, the whole step (forward, backward, apply) compiled;
- `replica_xla`: forward/backward compiled *inside* strategy.run, the
                 cross-replica apply outside the compiled function.

A chunk runs `steps_per_execution` steps in an in-graph loop and returns the summed stats vector
(`launcher.train.step_stats`), the task's metric results and the chunk's numerics telemetry, counted on the device.
Kept apart from the engine that drives the chunks: this is what is traced, and the chunk loops are what a
forkserver converts ahead (`convert_chunk_loops`).
"""

from __future__ import annotations

from types import SimpleNamespace

import keras
import tensorflow as tf

from launcher.train.step_stats import EXAMPLES, FINITE_NORMS, LOSS_SUM, STATS, TRAIN_STATS

SUM = tf.distribute.ReduceOp.SUM


class Steps:
    """The training and evaluation chunk functions of one model under its strategy, for one step kind.

    Built again when the set of trainable variables changes (the step is traced again)."""

    def __init__(self, strategy, model, optimizer, task, *, kind: str, accumulate: int, guard, telemetry: bool):
        self.model = model
        self.optimizer = optimizer
        self.accumulate = accumulate
        self.telemetry = telemetry  # False: no gradient norm, no per-step trace (the guard still runs)
        self.loss_fn = task.per_example_loss  # (y, outputs, sample_weight) -> float32 loss per example
        self._scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        self._forward_backward_fn = (
            tf.function(self._forward_backward, jit_compile=True) if kind == "replica_xla" else self._forward_backward
        )

        # Metrics are updated in replica context from the outputs the step returns. Under several replicas
        # outside the compiled forward (their on-read variables stay out of XLA, like the cross-replica apply);
        # on one replica (fused_xla) inside the compiled step, which then compiles whole.
        def replica_step(x, y, sample_weight=None):
            stats, outputs = self._apply_step(x, y, sample_weight)
            task.update(task.train_metrics, y, outputs, sample_weight, training=True)
            return stats

        def eval_step(x, y, sample_weight=None):
            stats, outputs = self._eval_forward(x, y, sample_weight)
            task.update(task.val_metrics, y, outputs, sample_weight, training=False)
            return stats

        # The replica functions have no tensor-dependent Python control flow: AutoGraph (which rewrites Python
        # source at trace time, ~2 s of every launch) converts only the two chunk loops (`convert_chunk_loops`).
        replica_step = tf.autograph.experimental.do_not_convert(replica_step)
        eval_step = tf.autograph.experimental.do_not_convert(eval_step)
        if kind == "fused_xla":
            replica_step = tf.function(replica_step, jit_compile=True)
            # Multi-replica evaluation keeps every example, so its last batch is ragged and shapes differ per
            # replica; a compiled forward there would be retraced with a relaxed shape that captures one device's
            # variables. Only one replica's evaluation is compiled.
            eval_step = tf.function(eval_step, jit_compile=True)

        self.train_chunk = train_loop(
            strategy,
            optimizer,
            task.train_metrics,
            guard,
            scaled=self._scaled,
            telemetry=telemetry,
            replica_step=replica_step,
        )
        self.eval_chunk = eval_loop(strategy, task.val_metrics, eval_step)

    def _forward_backward(self, x, y, sample_weight=None):
        """Scaled gradients of this replica's batch, its stats and outputs; with accumulation, the batch is
        `accumulate` micro-batches, each run forward and backward in turn and their gradients averaged.
        x and y may be nested (named features, a target per head): each part is split alike."""
        if self.accumulate == 1:
            grads, stats, outputs = self._micro_step(x, y, sample_weight)
        else:
            grads, stats, outputs = None, None, []
            parts = zip(*(_split(part, self.accumulate) for part in (x, y, sample_weight)), strict=True)
            for x_micro, y_micro, w_micro in parts:
                micro_grads, micro_stats, micro_outputs = self._micro_step(x_micro, y_micro, w_micro)
                micro_grads = [tf.convert_to_tensor(g) if g is not None else None for g in micro_grads]
                outputs.append(micro_outputs)
                if grads is None:
                    grads, stats = micro_grads, micro_stats
                else:
                    grads = [a if b is None else a + b for a, b in zip(grads, micro_grads, strict=True)]
                    stats += micro_stats
            grads = [g / self.accumulate if g is not None else None for g in grads]
            outputs = tf.nest.map_structure(lambda *micro: tf.concat(micro, axis=0), *outputs)
        return grads, tf.concat([stats, self._grad_telemetry(grads)], axis=0), outputs

    def _micro_step(self, x, y, sample_weight=None):
        with tf.GradientTape() as tape:
            outputs = self.model(x, training=True)
            per_example = self.loss_fn(y, outputs, sample_weight, training=True)
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

    def _apply_step(self, x, y, sample_weight=None):
        grads, stats, outputs = self._forward_backward_fn(x, y, sample_weight)
        self.optimizer.apply(grads, self.model.trainable_variables)
        return stats, outputs

    def _eval_forward(self, x, y, sample_weight=None):
        outputs = self.model(x, training=False)
        return _stats(self.loss_fn(y, outputs, sample_weight, training=False)), outputs


def eval_loop(strategy, metrics, eval_step):
    """The evaluation chunk: steps in an in-graph loop, the loss sums and the task's metrics."""

    @tf.function
    def eval_chunk(iterator, steps):
        totals = tf.zeros([STATS], tf.float32)
        for _ in tf.range(steps):
            batch = next(iterator)  # (x, y) or (x, y, sample_weight)
            totals += strategy.reduce(SUM, strategy.run(eval_step, args=batch), axis=None)
        return totals, {m.name: m.result() for m in metrics}

    return eval_chunk


def train_loop(strategy, optimizer, metrics, guard, *, scaled: bool, telemetry: bool, replica_step):
    """The training chunk: steps in an in-graph loop, numerics counted on the device.

    A step counts as skipped when the optimizer's iteration counter did not move (the loss-scale
    optimizer skipped its non-finite gradients). With on_nonfinite=stop a non-finite loss ends
    the chunk after that step, and so does a streak reaching collapse_steps: the guard on the host
    then stops the run at that exact step.
    """
    min_scale = float(guard.min_scale) if guard.min_scale is not None else -1.0
    stop_on_nonfinite = guard.on_nonfinite == "stop"
    collapse = guard.collapse_steps
    trace = telemetry
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
            batch = next(iterator)  # (x, y) or (x, y, sample_weight)
            step = strategy.reduce(SUM, strategy.run(replica_step, args=batch), axis=None)
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


def _split(part, n: int) -> list:
    """`n` micro-batches of a batch part: an array, a nest of them (named features, a target per head) or None."""
    if part is None:
        return [None] * n
    pieces = [tf.split(t, n) for t in tf.nest.flatten(part)]
    return [tf.nest.pack_sequence_as(part, [p[i] for p in pieces]) for i in range(n)]


def _stats(per_example):
    count = tf.cast(tf.shape(per_example)[0], tf.float32)
    return tf.stack([tf.reduce_sum(tf.cast(per_example, tf.float32)), count])


def convert_chunk_loops() -> None:
    """AutoGraph's rewrite of the two chunk loops (their Python `for`, `if` and `break` into graph control flow),
    done ahead: ~1 CPU-s of source transformation that every process pays on its first trace otherwise.

    AutoGraph keeps a conversion per code object and options, whatever the closure, so a forkserver that calls
    this before it forks spares it every launch it starts. Nothing is traced or run: TensorFlow's runtime is not
    started (a fork after it would be unsafe)."""
    one_replica = SimpleNamespace(num_replicas_in_sync=1)
    guard = SimpleNamespace(min_scale=None, on_nonfinite="stop", collapse_steps=0)
    loops = (
        train_loop(one_replica, None, [], guard, scaled=False, telemetry=False, replica_step=None),
        eval_loop(one_replica, [], None),
    )
    for loop in loops:
        tf.autograph.to_graph(loop.python_function)  # the same options tf.function converts with
