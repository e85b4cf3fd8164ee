"""ReplicaSafeLossScaleOptimizer semantics under default and mirrored strategies, with and without XLA."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from launcher.train.fused_update import FusedAdam, FusedSGD
from launcher.train.loss_scale import ReplicaSafeLossScaleOptimizer

NAN = float("nan")
STRATEGIES = ["default", "mirrored"]


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


def replica_safe(inner=lambda: keras.optimizers.SGD(0.1, momentum=0.9), **kwargs):
    defaults = {"initial_scale": 1024.0, "dynamic_growth_steps": 3}
    return lambda: ReplicaSafeLossScaleOptimizer(inner(), **{**defaults, **kwargs})


# The inner optimizers a skipped step must leave untouched: Keras's update ops and the fused kernels.
INNER = {
    "keras-sgd": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "fused-sgd": lambda: FusedSGD(0.1, momentum=0.9),
    "fused-adam": lambda: FusedAdam(0.01),
}


def stock(**kwargs):
    defaults = {"initial_scale": 1024.0, "dynamic_growth_steps": 3}
    return lambda: keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(0.1, momentum=0.9), **{**defaults, **kwargs}
    )


def poison_on(replicas, bad):
    return [NAN if i in bad else 1.0 for i in range(replicas)]


@pytest.mark.parametrize("inner", INNER)
@pytest.mark.parametrize("xla", [False, True], ids=["graph", "xla"])
@pytest.mark.parametrize("kind", STRATEGIES)
def test_non_finite_step_is_skipped_everywhere_and_scale_halves(kind, xla, inner):
    h = Harness(kind, xla, replica_safe(INNER[inner]))
    n = h.strategy.num_replicas_in_sync
    h.step([1.0] * n)  # one good step so the momentum slots are non-zero
    weights, state, scale = h.weights(), h.optimizer_state(), h.scale
    # Only the last replica overflows: every replica must still skip.
    h.step(poison_on(n, {n - 1}))
    for before, after in zip(weights, h.weights(), strict=True):
        np.testing.assert_array_equal(before, after)
    for before, after in zip(state, h.optimizer_state(), strict=True):
        np.testing.assert_array_equal(before, after)
    assert h.scale == scale / 2
    assert int(h.optimizer.step_counter.numpy()) == 0
    for copies in h.replica_weights():
        for copy in copies[1:]:
            np.testing.assert_array_equal(copies[0], copy)


@pytest.mark.parametrize("xla", [False, True], ids=["graph", "xla"])
@pytest.mark.parametrize("kind", STRATEGIES)
def test_scale_doubles_after_growth_interval(kind, xla):
    h = Harness(kind, xla, replica_safe(dynamic_growth_steps=3))
    n = h.strategy.num_replicas_in_sync
    scales = []
    for _ in range(7):
        h.step([1.0] * n)
        scales.append(h.scale)
    assert scales == [1024, 1024, 2048, 2048, 2048, 4096, 4096]
    assert np.all(np.isfinite(h.weights()[0]))


@pytest.mark.parametrize("xla", [False, True], ids=["graph", "xla"])
@pytest.mark.parametrize("kind", STRATEGIES)
def test_fixed_mode_never_changes_the_scale(kind, xla):
    h = Harness(kind, xla, replica_safe(dynamic=False, initial_scale=128.0, dynamic_growth_steps=1))
    n = h.strategy.num_replicas_in_sync
    first = h.weights()
    for poison in ([1.0] * n, poison_on(n, {0}), [1.0] * n, [1.0] * n):
        before = h.weights()
        h.step(poison)
        assert h.scale == 128.0
        changed = any(not np.array_equal(a, b) for a, b in zip(before, h.weights(), strict=True))
        assert changed == (not any(np.isnan(poison)))
    assert not np.array_equal(first[0], h.weights()[0])


def test_scale_respects_min_and_max():
    h = Harness("default", False, replica_safe(initial_scale=4.0, min_scale=2.0, max_scale=8.0, dynamic_growth_steps=1))
    for _ in range(3):
        h.step([NAN])
    assert h.scale == 2.0
    for _ in range(4):
        h.step([1.0])
    assert h.scale == 8.0


@pytest.mark.parametrize(("kind", "xla"), [("default", False), ("default", True), ("mirrored", False)])
def test_matches_keras_step_for_step_where_keras_works(kind, xla):
    ours = Harness(kind, xla, replica_safe(), seed=3)
    keras_lso = Harness(kind, xla, stock(), seed=3)
    n = ours.strategy.num_replicas_in_sync
    for a, b in zip(ours.weights(), keras_lso.weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    schedule = [[1.0] * n, [1.0] * n, [NAN] * n, [1.0] * n, [1.0] * n, [1.0] * n, [1.0] * n]
    for poison in schedule:
        ours.step(poison)
        keras_lso.step(poison)
        assert ours.scale == keras_lso.scale
        for a, b in zip(ours.weights(), keras_lso.weights(), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert ours.scale == 1024.0  # halved by the overflow, doubled after 3 good steps


def test_keras_lso_lets_another_replicas_overflow_into_the_weights():
    """Why the swap exists: stock checks replica 0's un-reduced gradients only."""
    h = Harness("mirrored", False, stock())
    h.step([1.0, NAN])
    assert np.isnan(h.weights()[0]).any()
    safe = Harness("mirrored", False, replica_safe())
    safe.step([1.0, NAN])
    assert np.isfinite(safe.weights()[0]).all()


def test_config_round_trip_keeps_mode_and_bounds():
    opt = replica_safe(dynamic=False, initial_scale=256.0, min_scale=2.0, max_scale=512.0)()
    clone = ReplicaSafeLossScaleOptimizer.from_config(opt.get_config())
    assert (clone.dynamic, clone.initial_scale, clone.min_scale, clone.max_scale) == (False, 256.0, 2.0, 512.0)
    assert isinstance(clone.inner_optimizer, keras.optimizers.SGD)
    assert clone.inner_optimizer.momentum == 0.9
    assert isinstance(clone, keras.optimizers.LossScaleOptimizer)


def test_scale_loss_uses_the_current_scale():
    h = Harness("default", False, replica_safe(initial_scale=64.0))
    assert float(h.optimizer.scale_loss(tf.constant(2.0))) == 128.0


def test_apply_outside_replica_context_is_a_clear_error():
    strategy = make_strategy("mirrored")
    with strategy.scope():
        var = keras.Variable(np.ones(2, "float32"))
        opt = replica_safe()()
        opt.build([var])
    with strategy.scope(), pytest.raises(ValueError, match="must be called in a replica context"):
        opt.apply([tf.ones(2)], [var])


def apply_once(make_optimizer, grads, xla):
    """One apply on a variable marked overwrite_with_gradient (Keras's float8 scales) and a plain one."""
    overwrite, plain = keras.Variable([1.0, 2.0]), keras.Variable([3.0, 4.0])
    overwrite.overwrite_with_gradient = True
    optimizer = make_optimizer()
    optimizer.build([overwrite, plain])
    tf.function(lambda: optimizer.apply([tf.constant(g) for g in grads], [overwrite, plain]), jit_compile=xla)()
    return overwrite.numpy(), plain.numpy(), float(optimizer.dynamic_scale.numpy())


@pytest.mark.parametrize("xla", [False, True], ids=["graph", "xla"])
@pytest.mark.parametrize(
    ("grads", "expected_overwrite"),
    [
        ([[16.0, 8.0], [8.0, 8.0]], [16.0, 8.0]),  # finite: the gradient itself, never divided by the scale
        ([[16.0, 8.0], [8.0, NAN]], [1.0, 2.0]),  # non-finite: the whole step is skipped
    ],
    ids=["finite", "non-finite"],
)
def test_overwrite_with_gradient_variables_follow_keras(grads, expected_overwrite, xla):
    ours = apply_once(lambda: ReplicaSafeLossScaleOptimizer(keras.optimizers.SGD(0.5), initial_scale=8.0), grads, xla)
    theirs = apply_once(
        lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.5), initial_scale=8.0), grads, xla
    )
    np.testing.assert_array_equal(ours[0], expected_overwrite)
    for mine, keras_value in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(mine, keras_value)
