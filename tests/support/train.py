"""In-process training pieces several test modules drive: an engine over the real config, build and data, and a
tiny model whose gradients can be poisoned per replica (loss-scaling and optimizer tests)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from support.config import TINY, config

QUIET = ["tracking.enabled=false", "checkpoint.enabled=false", "checkpoint.export_model=false", "precision=fp32"]


def engine_for(tmp_path, *overrides, validate: bool = True):
    from launcher.launch.training import TrainingLaunch
    from launcher.train.engine import Engine, EngineSettings

    launch = TrainingLaunch(
        config(*TINY, *QUIET, "xla=false", "train.max_steps_per_epoch=10", *overrides), tmp_path / "run", tmp_path, {}
    )
    launch.prepare()
    launch.build()
    return Engine(
        launch.context.built, launch.context.plan, launch.context.source, EngineSettings(verbose=0, validate=validate)
    )


def make_strategy(kind):
    if kind == "default":
        return tf.distribute.get_strategy()
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())


class Harness:
    """A tiny model + optimizer and a train step whose gradients can be poisoned per replica."""

    def __init__(self, kind, xla, make_optimizer, seed=0):
        keras.utils.set_random_seed(seed)
        self.strategy = make_strategy(kind)
        with self.strategy.scope():
            self.model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
            self.optimizer = make_optimizer()
            self.optimizer.build(self.model.trainable_variables)
        replicas = self.strategy.num_replicas_in_sync
        rng = np.random.default_rng(1)
        self.x = tf.constant(rng.normal(size=(8, 3)), tf.float32)
        self.y = tf.constant(rng.normal(size=(8, 2)), tf.float32)

        def forward_backward(x, y, poison):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(self.model(x) - y)) / replicas
                scaled = self.optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, self.model.trainable_variables)
            return [g * poison for g in grads]

        if xla and replicas > 1:
            forward_backward = tf.function(forward_backward, jit_compile=True)

        def replica_step(x, y, poison):
            self.optimizer.apply(forward_backward(x, y, poison), self.model.trainable_variables)

        if xla and replicas == 1:
            replica_step = tf.function(replica_step, jit_compile=True)

        @tf.function
        def step(poison):
            self.strategy.run(replica_step, args=(self.x, self.y, poison))

        self._step = step

    def step(self, poison_by_replica):
        """poison_by_replica: one multiplier per replica (1.0 or nan)."""
        values = self.strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(poison_by_replica[ctx.replica_id_in_sync_group], tf.float32)
        )
        self._step(values)

    def replica_weights(self):
        """Per replica: every model weight as numpy."""
        return [[np.array(r) for r in self.strategy.experimental_local_results(v.value)] for v in self.model.weights]

    def weights(self):
        return [w.numpy() for w in self.model.weights]

    def optimizer_state(self):
        """Every replica's copy of every inner-optimizer variable (slots, iterations)."""
        inner = self.optimizer.inner_optimizer
        return [np.array(r) for v in inner.variables for r in self.strategy.experimental_local_results(v.value)]

    @property
    def scale(self):
        return float(self.optimizer.dynamic_scale.numpy())


def shipped_in_process(folder, *overrides: str):
    """One run trained and exported in this process into `folder`/run (no checkpoints, tracked in `folder`'s own
    store): the outcome and the overrides given, which a later mode=eval or predict of it composes again."""
    from launcher.launch.training import execute
    from support.config import compose
    from support.tracking import store

    given = [*overrides, "checkpoint.enabled=false", f"tracking.uri={store(folder / 'mlflow.db')}"]
    outcome = execute(compose(*given), folder / "run", folder)
    assert outcome.error is None, outcome.error
    return outcome, given


def predicted_in_process(folder, given: list[str], out, *more: str) -> dict:
    """`mode=predict` of `folder`/run with `given` and `more` on top, into `out`: its metrics."""
    from launcher.inference.evaluate import Evaluation
    from support.config import compose

    node = compose(*given, "mode=predict", f"eval.run={folder / 'run'}", *more)
    return Evaluation(node, folder / "run", out, folder, "predict").execute()[1]
