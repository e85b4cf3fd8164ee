"""The Dense whose bias add and GELU/SiLU run as one compiled float32 cluster, against Keras's Dense: outputs,
gradients and weights after training steps under each policy, strategy and XLA setting; the layers the swap
leaves; its `.keras` file loaded by a stock Keras.

Tolerances are stated per policy (`TOLERANCE`, relative to each compared array's largest magnitude): float32 differs
from Keras's ops by XLA's erf and order of summation (~1e-6); float16 and bfloat16 by where the result is rounded
(Keras rounds after the bias add and inside the activation, the cluster once at its end).
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from support.replicas import train_steps

from launcher.train.fused_activation import FusedActivationDense
from launcher.train.layer_swaps import swap_layers
from launcher.train.saved_as_stock import save_as_stock

POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
TOLERANCE = {"float32": (1e-4, 1e-5), "mixed_float16": (5e-3, 5e-3), "mixed_bfloat16": (4e-2, 4e-2)}
STEPS = 4


def tiny_model():
    """Sequences of 5 vectors of 6: a GELU layer with bias, a SiLU layer without, a tanh layer (never swapped; smooth,
    so no low-precision rounding flips a kink and with it the gradients below, as a ReLU's would)."""
    return keras.Sequential(
        [
            keras.Input((5, 6)),
            keras.layers.Dense(16, activation="gelu", name="gelu"),
            keras.layers.Dense(12, activation="swish", use_bias=False, name="silu"),
            keras.layers.Dense(8, activation="tanh", name="tanh"),
            keras.layers.Flatten(),
            keras.layers.Dense(2, dtype="float32", name="head"),
        ],
        name="tiny",
    )


def train(swapped: bool, kind: str, xla: bool):
    """Per-step losses and train-mode outputs, the first step's gradients, every copy of every variable after
    `STEPS` SGD steps, and the trained model's outputs."""
    rng = np.random.default_rng(1)
    x, y = rng.normal(0.0, 2.0, size=(8, 5, 6)), rng.normal(size=(8, 2))
    return train_steps(tiny_model, swapped, kind, xla, x, y, learning_rate=0.1, steps=STEPS)


_FLOAT32_STOCK: dict[tuple[str, bool], dict] = {}


def float32_stock(kind: str, xla: bool) -> dict:
    """Keras's own Dense trained under float32, once per test process for each strategy and XLA setting: the float32
    cells' reference and the exact result the low-precision cells are held against. `train` seeds everything, so a
    second training gave the same arrays (it cost a training in every low-precision cell)."""
    if (kind, xla) not in _FLOAT32_STOCK:
        policy = keras.mixed_precision.global_policy().name
        keras.mixed_precision.set_global_policy("float32")
        try:
            _FLOAT32_STOCK[kind, xla] = train(False, kind, xla)
        finally:
            keras.mixed_precision.set_global_policy(policy)
    return _FLOAT32_STOCK[kind, xla]


def close(got, want, policy, what):
    rtol, atol = TOLERANCE[policy]
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(float(np.max(np.abs(want))), 1e-12)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * scale, err_msg=what)


def error(got, exact) -> float:
    """The largest difference from the float32 result, relative to its largest magnitude."""
    exact = np.asarray(exact, np.float64)
    return float(np.max(np.abs(np.asarray(got, np.float64) - exact)) / max(float(np.max(np.abs(exact))), 1e-12))


@pytest.mark.parametrize("policy", POLICIES, indirect=True)
@pytest.mark.parametrize("kind", ["default", "mirrored"])
@pytest.mark.parametrize("xla", [False, True], ids=["graph", "xla"])
def test_swapped_dense_trains_and_infers_like_keras(policy, kind, xla):
    want = float32_stock(kind, xla) if policy == "float32" else train(False, kind, xla)
    got = train(True, kind, xla)
    assert [type(layer) for layer in got["model"].layers[:3]] == [
        FusedActivationDense,
        FusedActivationDense,
        keras.layers.Dense,
    ]
    assert float(np.max(np.abs(np.diff(got["losses"])))) > 0  # the steps moved the weights
    close(got["losses"], want["losses"], policy, "losses")
    close(got["outputs"], want["outputs"], policy, "train-mode outputs")
    # Keras sums a bias gradient in the low precision, the cluster in float32: there both are held against the
    # float32 run, the swapped layer no further from it than Keras's
    exact = float32_stock(kind, xla) if policy != "float32" else None
    pairs = [
        (f"gradient of {variable.path}", g, w, exact and exact["grads"][i])
        for i, (g, w, variable) in enumerate(
            zip(got["grads"], want["grads"], got["model"].trainable_variables, strict=True)
        )
    ]
    assert got["state"].keys() == want["state"].keys()
    for path, replicas in want["state"].items():
        for i, (g, w) in enumerate(zip(got["state"][path], replicas, strict=True)):
            pairs.append((f"{path} after {STEPS} steps", g, w, exact and exact["state"][path][i]))
    against_exact = []
    for what, g, w, e in pairs:
        if e is None:
            close(g, w, policy, what)
        else:
            against_exact.append((what, error(g, e), error(w, e)))
    if against_exact:
        # each array within the policy's tolerance of the float32 result; over all of them, no further than Keras's.
        # One array alone is a handful of roundings: which of the two lands nearer varies with the CPU's kernels (the
        # silu kernel's gradient was 2.4x Keras's error on an AVX2-only CPU, 0.020 against 0.008, and nearer on others)
        assert max(got for _, got, _ in against_exact) <= TOLERANCE[policy][1], against_exact
        swapped, stock = (float(np.mean([row[i] for row in against_exact])) for i in (1, 2))
        assert swapped <= 1.5 * stock + 2e-3, (swapped, stock, against_exact)
    close(got["inference"], want["inference"], policy, "inference outputs")


def test_the_cluster_computes_in_float32_and_rounds_once():
    """Under bfloat16 the swapped layer is closer to the float32 result than Keras's (it rounds once)."""
    keras.utils.set_random_seed(0)
    exact = keras.layers.Dense(64, activation="gelu", dtype="float32")
    x = np.random.default_rng(2).normal(0.0, 3.0, size=(32, 16)).astype("float32")
    truth = np.asarray(exact(x))
    errors = {}
    for cls in (keras.layers.Dense, FusedActivationDense):
        layer = keras.layers.Dense(64, activation="gelu", dtype="mixed_bfloat16")
        layer.build((None, 16))
        layer.set_weights(exact.get_weights())
        layer.__class__ = cls
        errors[cls] = float(np.mean(np.abs(np.asarray(layer(x), np.float32) - truth)))
    assert errors[FusedActivationDense] < errors[keras.layers.Dense]


def test_swap_records_dense_layers_with_why_and_leaves_the_others():
    class MyDense(keras.layers.Dense):
        pass

    inputs = keras.Input((6,))
    x = keras.layers.Dense(4, activation="gelu", name="gelu")(inputs)
    x = keras.layers.Dense(4, activation="silu", use_bias=False, name="silu")(x)
    x = keras.layers.Dense(4, activation="relu", name="relu")(x)
    x = keras.layers.Dense(4, name="linear")(x)
    x = MyDense(4, activation="gelu", name="mine")(x)
    x = keras.layers.Dense(4, activation="gelu", dtype="float64", name="wide")(x)
    model = keras.Model(inputs, x)
    record = swap_layers(model, replicas=1)
    assert sorted(record.swapped) == ["gelu", "silu"]
    assert record.swapped["gelu"].startswith("bias add and gelu") and record.swapped["silu"].startswith("silu")
    assert sorted(record.kept) == ["mine", "wide"]
    assert "MyDense" in record.kept["mine"] and "float64" in record.kept["wide"]
    assert type(model.get_layer("relu")) is keras.layers.Dense
    assert type(model.get_layer("gelu")) is FusedActivationDense
    # float64 inputs are refused per call too: a model's float32 layer fed float64 runs Keras's ops
    assert FusedActivationDense.unfused_because(model.get_layer("gelu"), tf.zeros([1, 6], tf.float64))


@pytest.mark.slow
@pytest.mark.e2e  # a second interpreter: a Keras without the launcher (the session's `stock_keras`)
@pytest.mark.xdist_group("stock-keras")  # with test_fused_batch_norm's: one interpreter loads both files
def test_a_swapped_model_s_keras_file_loads_in_a_stock_keras_and_predicts_the_same(stock_keras):
    trained = train(True, "default", False)["model"]
    x = np.random.default_rng(4).normal(0.0, 2.0, size=(3, 5, 6)).astype("float32")
    kinds, got = stock_keras.predict(trained, x)
    assert kinds == ["keras.src.layers.core.dense.Dense", "keras.src.layers.reshaping.flatten.Flatten"]
    np.testing.assert_allclose(got, np.asarray(trained(x, training=False)), rtol=1e-5, atol=1e-6)


def test_stock_weights_load_into_a_swapped_model_by_checkpoint(tmp_path):
    stock = float32_stock("default", False)["model"]
    prefix = tf.train.Checkpoint(model=stock).save(str(tmp_path / "ckpt"))
    keras.utils.set_random_seed(5)
    swapped = tiny_model()
    swap_layers(swapped, 1)
    tf.train.Checkpoint(model=swapped).restore(prefix).assert_consumed()
    x = np.random.default_rng(4).normal(0.0, 2.0, size=(3, 5, 6)).astype("float32")
    close(swapped(x, training=False), stock(x, training=False), "float32", "predictions")
    assert [v.path for v in swapped.variables] == [v.path for v in stock.variables]


def test_a_swapped_class_is_named_as_the_stock_one_in_saved_configs():
    """`saved_as_stock`: the swapped class's config names the stock class, which loading still gives."""

    class Swapped(keras.layers.Dense):
        pass

    save_as_stock(Swapped, keras.layers.Dense, "keras.layers.Dense")
    config = keras.saving.serialize_keras_object(Swapped(3))
    assert (config["module"], config["class_name"]) == ("keras.layers", "Dense")
    assert type(keras.saving.deserialize_keras_object(config)) is keras.layers.Dense
