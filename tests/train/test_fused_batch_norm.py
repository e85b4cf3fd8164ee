"""The fused BatchNormalization against Keras's, layer by layer: outputs, gradients and moving averages after
training steps, under each policy, strategy and XLA setting; frozen layers, the first batch, the inputs it leaves
to Keras's ops, and its `.keras` file loaded by a stock Keras.

Tolerances are stated per policy (`TOLERANCE`): float32 differs from Keras's ops by the order the kernel sums in
(~1e-6 relative); float16 and bfloat16 outputs by a rounding of the output (the statistics are float32 in both).
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from support.replicas import make_strategy, train_steps

from launcher.train.fused_batch_norm import FusedBatchNormalization
from launcher.train.layer_swaps import swap_layers

POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
# (rtol, atol) per compute dtype, relative to each compared array's largest magnitude.
TOLERANCE = {"float32": (1e-4, 1e-5), "mixed_float16": (4e-3, 4e-3), "mixed_bfloat16": (3e-2, 3e-2)}
STEPS = 4


def tiny_cnn(**bn):
    return keras.Sequential(
        [
            keras.Input((6, 6, 3)),
            keras.layers.Conv2D(4, 3, padding="same", use_bias=False, name="conv"),
            keras.layers.BatchNormalization(momentum=0.8, name="bn", **bn),
            keras.layers.Activation("relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(2, dtype="float32", name="head"),
        ],
        name="tiny",
    )


def train(swapped: bool, kind: str, xla: bool, steps: int = STEPS, **bn):
    """Per-step losses and train-mode outputs, the gradients of the first step, every copy of every variable after
    `steps` SGD steps, and the inference outputs of the trained model."""
    rng = np.random.default_rng(1)
    x, y = rng.normal(2.0, 3.0, size=(8, 6, 6, 3)), rng.normal(size=(8, 2))
    return train_steps(lambda: tiny_cnn(**bn), swapped, kind, xla, x, y, learning_rate=0.2, steps=steps)


def close(got, want, policy, what):
    rtol, atol = TOLERANCE[policy]
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(float(np.max(np.abs(want))), 1e-12)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * scale, err_msg=what)


def assert_same_training(got, want, policy):
    close(got["losses"], want["losses"], policy, "losses")
    close(got["outputs"], want["outputs"], policy, "train-mode outputs")
    for g, w, variable in zip(got["grads"], want["grads"], got["model"].trainable_variables, strict=True):
        close(g, w, policy, f"gradient of {variable.path}")
    assert got["state"].keys() == want["state"].keys()
    for path, replicas in want["state"].items():
        for g, w in zip(got["state"][path], replicas, strict=True):
            close(g, w, policy, f"{path} after {STEPS} steps")
    close(got["inference"], want["inference"], policy, "inference outputs")


@pytest.mark.parametrize("policy", POLICIES, indirect=True)
@pytest.mark.parametrize("kind", ["default", "mirrored"])
@pytest.mark.parametrize("xla", [False, True], ids=["eager-graph", "xla"])
def test_swapped_layer_trains_and_infers_like_keras(policy, kind, xla):
    want = train(False, kind, xla)
    got = train(True, kind, xla)
    assert type(got["model"].get_layer("bn")) is FusedBatchNormalization
    assert type(want["model"].get_layer("bn")) is keras.layers.BatchNormalization
    assert_same_training(got, want, policy)
    moving = got["state"]["tiny/bn/moving_variance"][0]
    assert not np.allclose(moving, 1.0)  # the averages did move: the comparison is not of initial values


@pytest.mark.parametrize("policy", ["float32"], indirect=True)
def test_synchronized_statistics_under_mirrored_stay_keras_s(policy):
    want = train(False, "mirrored", False, synchronized=True)
    got = train(True, "mirrored", False, synchronized=True)
    assert_same_training(got, want, policy)
    layer = got["model"].get_layer("bn")
    x = tf.zeros((2, 6, 6, 4))
    assert layer.unfused_because(x, training=False) is None  # inference runs fused
    reasons = []  # asked in each replica's context, where Keras's moments all-reduce
    make_strategy("mirrored").run(lambda: reasons.append(layer.unfused_because(x, training=True)) or tf.constant(0.0))
    assert reasons and all("synchronized=True with 2 replicas" in reason for reason in reasons)
    assert layer.unfused_because(x, training=True) is None  # one replica (the default strategy): fused


@pytest.mark.parametrize("policy", POLICIES, indirect=True)
def test_a_frozen_layer_runs_in_inference_mode_and_keeps_its_averages(policy):
    keras.utils.set_random_seed(0)
    stock = keras.layers.BatchNormalization()
    x = tf.constant(np.random.default_rng(0).normal(1.0, 2.0, size=(4, 3, 3, 5)), tf.float32)
    stock.build(x.shape)
    stock.moving_mean.assign(np.linspace(-1, 1, 5))
    stock.moving_variance.assign(np.linspace(0.5, 3, 5))
    fused = keras.layers.BatchNormalization()
    fused.build(x.shape)
    fused.set_weights(stock.get_weights())
    fused.__class__ = FusedBatchNormalization
    stock.trainable = fused.trainable = False
    before = [w.copy() for w in fused.get_weights()]
    got, want = fused(x, training=True), stock(x, training=True)
    close(got, want, policy, "frozen output")
    close(got, stock(x, training=False), policy, "frozen = inference")
    for after, then in zip(fused.get_weights(), before, strict=True):
        np.testing.assert_array_equal(after, then)


@pytest.mark.parametrize("shape", [(1, 1, 1, 3), (2, 1, 1, 3), (3, 4, 5, 2)], ids=["one-value", "two", "batch"])
def test_the_first_batch_moves_the_averages_as_keras(shape):
    """From the initial averages (0 and 1), one batch: Keras's biased variance, even for one value per channel."""
    x = tf.constant(np.random.default_rng(2).normal(3.0, 2.0, size=shape), tf.float32)
    stock, fused = keras.layers.BatchNormalization(momentum=0.5), keras.layers.BatchNormalization(momentum=0.5)
    fused.__class__ = FusedBatchNormalization
    got, want = fused(x, training=True), stock(x, training=True)
    close(got, want, "float32", "output")
    close(fused.moving_mean, stock.moving_mean, "float32", "moving mean")
    close(fused.moving_variance, stock.moving_variance, "float32", "moving variance")
    biased = np.var(np.asarray(x), axis=(0, 1, 2))
    np.testing.assert_allclose(np.asarray(fused.moving_variance), 0.5 + 0.5 * biased, rtol=1e-5)


@pytest.mark.parametrize(
    ("make", "shape", "call", "reason"),
    [
        (dict(), (4, 5), {}, "2-D inputs"),
        (dict(), (2, 3, 5), {}, "3-D inputs"),
        (dict(axis=1), (2, 5, 3, 3), {}, "axis=1"),
        (dict(), (2, 2, 3, 5), {"mask": np.array([[[True, False, True]] * 2, [[True, True, False]] * 2])}, "a mask"),
        (dict(dtype="float64"), (2, 3, 3, 5), {}, "float64"),
        (dict(renorm=True), (2, 3, 3, 5), {}, "renorm=True"),
        (dict(epsilon=1e-6), (2, 3, 3, 5), {}, "epsilon=1e-06 is below"),
    ],
    ids=["2d", "3d", "channels-first", "mask", "float64", "renorm", "tiny-epsilon"],
)
def test_inputs_the_kernel_cannot_take_run_keras_ops(make, shape, call, reason):
    x = np.random.default_rng(3).normal(size=shape).astype(make.get("dtype", "float32"))
    stock, fused = keras.layers.BatchNormalization(**make), keras.layers.BatchNormalization(**make)
    fused.__class__ = FusedBatchNormalization
    mask = call.get("mask")
    assert reason in fused.unfused_because(tf.constant(x), None if mask is None else tf.constant(mask))
    for training in (True, False):
        np.testing.assert_allclose(fused(x, training=training, **call), stock(x, training=training, **call))
    np.testing.assert_allclose(fused.moving_variance, stock.moving_variance)


def test_swap_records_each_layer_with_why_and_leaves_the_others():
    class MyNorm(keras.layers.BatchNormalization):
        pass

    inputs = keras.Input((6, 6, 3))
    x = keras.layers.BatchNormalization(name="plain")(inputs)
    x = keras.layers.BatchNormalization(name="synced", synchronized=True)(x)
    x = keras.layers.BatchNormalization(name="renormed", renorm=True)(x)
    x = MyNorm(name="mine")(x)
    inner = keras.Sequential([keras.Input((4,)), keras.layers.BatchNormalization(name="flat")], name="inner")
    outputs = inner(keras.layers.Dense(4)(keras.layers.Flatten()(x)))
    model = keras.Model(inputs, outputs)
    record = swap_layers(model, replicas=2)
    assert sorted(record.swapped) == ["plain", "synced"]
    assert "each replica's own statistics" in record.swapped["plain"]
    assert "all-reduced across the 2 replicas" in record.swapped["synced"]
    assert sorted(record.kept) == ["inner/flat", "mine", "renormed"]
    assert "2-D inputs" in record.kept["inner/flat"] and "MyNorm" in record.kept["mine"]
    assert type(model.get_layer("plain")) is FusedBatchNormalization
    assert type(model.get_layer("mine")) is MyNorm
    assert type(inner.get_layer("flat")) is keras.layers.BatchNormalization
    assert swap_layers(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]), 1) is None


@pytest.mark.slow
@pytest.mark.e2e  # a second interpreter: a Keras without the launcher (the session's `stock_keras`)
@pytest.mark.xdist_group("stock-keras")  # with test_fused_activation's: one interpreter loads both files
def test_a_swapped_model_s_keras_file_loads_in_a_stock_keras_and_predicts_the_same(stock_keras):
    trained = train(True, "default", False)["model"]
    x = np.random.default_rng(4).normal(2.0, 3.0, size=(5, 6, 6, 3)).astype("float32")
    kinds, got = stock_keras.predict(trained, x)
    assert "keras.src.layers.normalization.batch_normalization.BatchNormalization" in kinds
    np.testing.assert_allclose(got, np.asarray(trained(x, training=False)), rtol=1e-5, atol=1e-6)


def test_stock_weights_load_into_a_swapped_model_and_back_by_checkpoint(tmp_path):
    stock = train(False, "default", False)["model"]
    prefix = tf.train.Checkpoint(model=stock).save(str(tmp_path / "ckpt"))
    keras.utils.set_random_seed(5)
    swapped = tiny_cnn()
    swap_layers(swapped, 1)
    tf.train.Checkpoint(model=swapped).restore(prefix).assert_consumed()
    x = np.random.default_rng(4).normal(2.0, 3.0, size=(5, 6, 6, 3)).astype("float32")
    close(swapped(x, training=False), stock(x, training=False), "float32", "predictions")
    assert [v.path for v in swapped.variables] == [v.path for v in stock.variables]
