"""Fused optimizer updates (the hybrid step) against Keras's own, step for step."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from support.train import engine_for

from launcher.train.fused_update import FusedAdam, FusedAdamW, FusedSGD

OPTIMIZERS = {
    "adam": (keras.optimizers.Adam, FusedAdam, {"learning_rate": 0.01}),
    "adamw": (keras.optimizers.AdamW, FusedAdamW, {"learning_rate": 0.01, "weight_decay": 0.1}),
    "sgd": (keras.optimizers.SGD, FusedSGD, {"learning_rate": 0.05}),
    "sgd-momentum": (keras.optimizers.SGD, FusedSGD, {"learning_rate": 0.05, "momentum": 0.9}),
    "sgd-nesterov": (keras.optimizers.SGD, FusedSGD, {"learning_rate": 0.05, "momentum": 0.9, "nesterov": True}),
    "adam-clipnorm": (keras.optimizers.Adam, FusedAdam, {"learning_rate": 0.01, "clipnorm": 0.1}),
}


def mirrored():
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())


def train(optimizer_cls, kwargs, strategy, steps=6, xla=False, embedding=False):
    """Weights and optimizer variables (every replica's copy) after `steps` steps of a tiny model."""
    keras.utils.set_random_seed(0)
    with strategy.scope():
        if embedding:  # its gradient is a tf.IndexedSlices
            model = keras.Sequential(
                [
                    keras.Input((4,), dtype="int32"),
                    keras.layers.Embedding(20, 3),
                    keras.layers.Flatten(),
                    keras.layers.Dense(2),
                ]
            )
        else:
            model = keras.Sequential(
                [keras.Input((3,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)]
            )
        optimizer = optimizer_cls(**kwargs)
        optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(1)
    x = rng.integers(0, 20, size=(8, 4)).astype("int32") if embedding else rng.normal(size=(8, 3)).astype("float32")
    y = rng.normal(size=(8, 2)).astype("float32")
    replicas = strategy.num_replicas_in_sync

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y)) / replicas
        optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)

    if xla:
        replica_step = tf.function(replica_step, jit_compile=True)

    @tf.function
    def step():
        strategy.run(replica_step, args=(x, y))

    for _ in range(steps):
        step()

    def copies(variable):
        return [np.array(c) for c in strategy.experimental_local_results(variable.value)]

    return [copies(v) for v in model.weights], [copies(v) for v in optimizer.variables]


def assert_close(expected, actual, rtol=1e-5, atol=1e-6):
    assert len(expected) == len(actual)
    for want, got in zip(expected, actual, strict=True):
        for w, g in zip(want, got, strict=True):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_fused_update_matches_keras_step_for_step(name):
    keras_cls, fused_cls, kwargs = OPTIMIZERS[name]
    strategy = tf.distribute.get_strategy()
    want_weights, want_state = train(keras_cls, kwargs, strategy)
    got_weights, got_state = train(fused_cls, kwargs, strategy)
    assert_close(want_weights, got_weights)
    assert_close(want_state, got_state)
    # Training moved the weights: the comparison above is not between two untouched models.
    initial, _ = train(keras_cls, kwargs, strategy, steps=0)
    assert not np.allclose(initial[0][0], got_weights[0][0])


@pytest.mark.parametrize("name", ["adam", "sgd-momentum"])
def test_fused_update_under_mirrored_updates_every_replica_like_keras(name):
    keras_cls, fused_cls, kwargs = OPTIMIZERS[name]
    want_weights, want_state = train(keras_cls, kwargs, mirrored())
    got_weights, got_state = train(fused_cls, kwargs, mirrored())
    assert_close(want_weights, got_weights)
    assert_close(want_state, got_state)
    for copies in got_weights + got_state:
        np.testing.assert_array_equal(copies[0], copies[1])  # replicas identical


def test_fused_update_compiles_under_xla():
    keras_cls, fused_cls, kwargs = OPTIMIZERS["adam"]
    strategy = tf.distribute.get_strategy()
    want, _ = train(keras_cls, kwargs, strategy, xla=True)
    got, _ = train(fused_cls, kwargs, strategy, xla=True)
    assert_close(want, got)


@pytest.mark.parametrize("name", ["adam", "sgd-momentum"])
def test_sparse_gradients_fall_back_to_keras_ops(name):
    keras_cls, fused_cls, kwargs = OPTIMIZERS[name]
    strategy = tf.distribute.get_strategy()
    want, _ = train(keras_cls, kwargs, strategy, embedding=True)
    got, _ = train(fused_cls, kwargs, strategy, embedding=True)
    assert_close(want, got)


def test_fused_optimizer_round_trips_its_config():
    optimizer = FusedAdamW(learning_rate=0.01, weight_decay=0.2, clipnorm=1.0)
    clone = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(clone) is FusedAdamW
    assert clone.weight_decay == pytest.approx(0.2) and clone.clipnorm == 1.0


# ------------------------------------------------ the engine's hybrid step vs its graph step


def engine_weights(tmp_path, *overrides, steps=8):
    from launcher.contract import Position

    engine = engine_for(tmp_path, "seed=3", f"train.max_steps_per_epoch={steps}", "checkpoint=off", *overrides)
    engine.fit(1, start=Position())
    strategy = engine.strategy
    weights = [[np.array(c) for c in strategy.experimental_local_results(v.value)] for v in engine.model.weights]
    return engine, weights


@pytest.mark.slow  # two trainings per precision, seconds of CPU in this process
@pytest.mark.parametrize(
    "overrides",
    [
        ("precision=fp32",),
        ("precision=bf16",),
        ("precision=mixed", "strategy=mirrored", "loss_scale.implementation=replica_safe"),
    ],
    ids=["fp32", "bf16", "float16-mirrored-replica-safe"],
)
def test_hybrid_step_gives_the_weights_of_the_graph_step(tmp_path, overrides):
    hybrid, got = engine_weights(tmp_path / "hybrid", *overrides, "optimizer.update=fused")
    graph, want = engine_weights(tmp_path / "graph", *overrides, "optimizer.update=keras")
    assert hybrid.plan.step.kind == "hybrid" and graph.plan.step.kind == "graph"
    inner = getattr(hybrid.optimizer, "inner_optimizer", hybrid.optimizer)
    assert type(inner) is FusedAdam
    assert type(getattr(graph.optimizer, "inner_optimizer", graph.optimizer)) is keras.optimizers.Adam
    assert_close(want, got, rtol=1e-4, atol=1e-5)
    assert int(inner.iterations.numpy()) == 8


def test_checkpoints_move_between_keras_and_fused_optimizers(tmp_path):
    """Same slot variables in the same places: a run can switch optimizer.update and resume."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    saved = keras.optimizers.Adam(0.01)
    saved.build(model.trainable_variables)
    for i, variable in enumerate(saved.variables):
        variable.assign(np.full(variable.shape, i + 1.5, variable.dtype))
    path = tf.train.Checkpoint(optimizer=saved).save(str(tmp_path / "ckpt"))
    restored = FusedAdam(0.01)
    restored.build(model.trainable_variables)
    tf.train.Checkpoint(optimizer=restored).restore(path).assert_consumed()
    for want, got in zip(saved.variables, restored.variables, strict=True):
        np.testing.assert_array_equal(want.numpy(), got.numpy())
