"""Model FLOPs utilisation's inputs (`launcher.launch.mfu`): a model's training FLOPs per example counted from its
graph, and the matmul peak taken from the measured rates, the faster backend for the run's dtype."""

from __future__ import annotations

import keras

from launcher.launch.mfu import forward_flops_per_example, matmul_peak, process_age_seconds, training_flops_per_example


def _dense(inputs: int, units: int):
    x = keras.Input((inputs,))
    return keras.Model(x, keras.layers.Dense(units, use_bias=False)(x))


def test_the_flops_of_a_dense_layer_are_its_matmul_and_training_triples_them():
    model = _dense(8, 4)
    assert forward_flops_per_example(model) == 2 * 8 * 4  # one multiply and one add per weight
    assert training_flops_per_example(model) == 3 * 2 * 8 * 4  # forward + two backward matmuls


def test_the_peak_is_the_faster_backend_for_the_dtype_in_flops():
    rates = {"float32_graph": 100.0, "float32_xla": 150.0, "bfloat16_graph": 400.0, "bfloat16_xla": 90.0}
    assert matmul_peak("float32", rates) == 150.0e9
    assert matmul_peak("bfloat16", rates) == 400.0e9


def test_the_process_age_is_known_on_linux_and_counts_from_the_start():
    age = process_age_seconds()
    assert age is not None and 0 < age < 24 * 3600


def test_a_model_of_named_inputs_is_counted_with_its_inputs_by_name():
    inputs = {"dose": keras.Input((5,), name="dose"), "age": keras.Input((3,), name="age")}  # not in sorted order
    joined = keras.layers.Concatenate()([inputs["age"], inputs["dose"]])
    model = keras.Model(inputs, keras.layers.Dense(2, use_bias=False)(joined))
    assert forward_flops_per_example(model) == 2 * 8 * 2


def test_a_sequential_model_never_called_is_counted_from_its_declared_input():
    """Keras 3 defines a Sequential's `input` at its first call; the count runs before any."""
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, use_bias=False)])
    assert forward_flops_per_example(model) == 2 * 8 * 4
