"""ReplicaSafeLossScaleOptimizer semantics under default and mirrored strategies, with and without XLA."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from support.train import Harness, make_strategy

from launcher.train.fused_update import FusedAdam, FusedSGD
from launcher.train.loss_scale import ReplicaSafeLossScaleOptimizer

NAN = float("nan")
STRATEGIES = ["default", "mirrored"]


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
