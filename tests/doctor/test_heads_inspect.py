"""The doctor's look inside a model (`launcher.doctor.inspect`) on a model of two named inputs and two heads: the
replayed step takes the batch's structures (a dict of features, a dict of targets, sample weights) and names the
feature, the head or the layer where the first non-finite value appears."""

from __future__ import annotations

import heads_parts
import keras
import numpy as np
import pytest

from launcher.doctor.inspect import activation_ranges, first_nonfinite, output_risk
from launcher.train.tasks import Heads, Task


@keras.saving.register_keras_serializable(package="tests")
class InfGradient(keras.layers.Layer):
    """Identity forward; its backward pass returns inf (training only)."""

    def call(self, x, training=False):
        import tensorflow as tf

        if not training:
            return x

        @tf.custom_gradient
        def identity(v):
            return tf.identity(v), lambda dy: dy * float("inf")

        return identity(x)


def heads_task() -> Heads:
    """kind (3 classes) and size (a value), weighted 1 and 0.5, as task.heads builds them."""
    kind = Task("classification", keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None))
    size = Task("regression", keras.losses.MeanSquaredError(reduction=None))
    return Heads({"kind": kind, "size": size}, {"kind": 1.0, "size": 0.5}, ["kind", "size"])


def batch(n: int = 16):
    x, y, weight = heads_parts.load(n)["train"]
    return x, y, weight


def poisoned_backward():
    """cat -> cat_dense -> poison (inf gradient) joins num; heads kind and size as a dict."""
    num, cat = keras.Input((4,), name="num"), keras.Input((3,), name="cat")
    branch = InfGradient(name="poison")(keras.layers.Dense(4, name="cat_dense")(cat))
    h = keras.layers.Dense(8, activation="relu", name="body")(keras.layers.Concatenate()([num, branch]))
    heads = {"kind": keras.layers.Dense(3, name="kind")(h), "size": keras.layers.Dense(1, name="size")(h)}
    return keras.Model({"num": num, "cat": cat}, heads)


@pytest.mark.parametrize("builder", ["build", "build_list"])
def test_a_finite_step_of_two_inputs_and_two_heads_is_replayed_whole(builder):
    model = getattr(heads_parts, builder)(None)
    x, y, weight = batch()
    culprit = first_nonfinite(model, heads_task().per_example_loss, x, y, 1.0, 3, weight)
    assert (culprit.direction, culprit.layer, culprit.step) == ("unknown", None, 3)
    assert "finite everywhere" in culprit.detail


def test_a_nan_feature_is_named_by_its_name():
    x, y, weight = batch()
    x["cat"][[2, 5], 1] = np.nan
    culprit = first_nonfinite(heads_parts.build(None), heads_task().per_example_loss, x, y, 1.0, 1, weight)
    assert culprit.direction == "input"
    assert culprit.detail == "2 example(s) of the batch (feature cat) contain NaN or inf"


def test_a_head_whose_output_overflows_is_named_in_the_forward_pass():
    model = heads_parts.build(None)
    kernel, bias = model.get_layer("size").get_weights()
    model.get_layer("size").set_weights([np.full_like(kernel, np.inf), bias])
    x, y, weight = batch()
    culprit = first_nonfinite(model, heads_task().per_example_loss, x, y, 1.0, 1, weight)
    assert (culprit.direction, culprit.layer) == ("forward", "size")


def test_a_layer_on_one_input_s_branch_is_localised_in_the_backward_pass():
    x, y, weight = batch()
    culprit = first_nonfinite(poisoned_backward(), heads_task().per_example_loss, x, y, 128.0, 7, weight)
    assert (culprit.direction, culprit.layer) == ("backward", "poison")
    assert "input gradient" in culprit.detail


def test_activation_ranges_read_every_layer_of_a_dict_input_model():
    model = heads_parts.build(None)
    ranges = activation_ranges(model, batch()[0])
    assert {"kind", "size"} <= set(ranges)
    assert all(np.isfinite(value) for value in ranges.values())


def test_float16_heads_are_each_named_as_an_output_risk():
    risk = output_risk(lambda: heads_parts.build(None), "mixed_float16")
    assert risk is not None and risk.kind == "output"
    assert set(risk.layers) == {"kind", "size"}
    assert "float16" in risk.detail and "every head" in risk.fix
