"""A model with several outputs: under mixed policies every output gets float32, none dropped; while the task
has one head, such a model is refused before training (a ConfigError naming its outputs, exit 2, no MLflow run)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from fakes import CPU_PLAIN
from support.config import config
from support.tracking import runs_in

from launcher.config.errors import ConfigError
from launcher.plan.decisions import OutputPlan
from launcher.plan.resolve import resolve
from launcher.plan.schedule import schedule
from launcher.train.build import build, float32_output
from launcher.train.registry import DATASETS

DATA = ["dataset=synthetic", "dataset.kind=tabular", "dataset.shape=[6]", "dataset.num_examples=256"]
MIXED = ["mixed_float16", "mixed_bfloat16"]


def _two_heads(structure: str, float32_head: bool = False):
    """A tiny functional model with heads `a` and `b` as a list or a dict (`b` already float32 when asked)."""
    inputs = keras.Input((6,))
    x = keras.layers.Dense(8, activation="relu")(inputs)
    a = keras.layers.Dense(3, name="a")(x)
    b = keras.layers.Dense(3, name="b", dtype="float32" if float32_head else None)(x)
    return keras.Model(inputs, {"a": a, "b": b} if structure == "dict" else [a, b])


@pytest.mark.parametrize("policy", MIXED)
@pytest.mark.parametrize("structure", ["list", "dict"])
def test_every_output_becomes_float32_with_its_name_and_values_kept(policy, structure):
    keras.mixed_precision.set_global_policy(policy)
    model = _two_heads(structure)
    wrapped, record = float32_output(model, mixed=True)
    assert [t.dtype for t in wrapped.outputs] == ["float32", "float32"]
    x = np.random.default_rng(0).normal(size=(5, 6)).astype("float32")
    before, after = model(x), wrapped(x)
    assert isinstance(after, dict) and sorted(after) == ["a", "b"]  # a list's heads too, keyed by output name
    before = before if structure == "dict" else dict(zip(["a", "b"], before, strict=True))
    pairs = [(before[k], after[k]) for k in ("a", "b")]
    for raw, out in pairs:
        assert raw.dtype != tf.float32 and out.dtype == tf.float32
        np.testing.assert_array_equal(out.numpy(), tf.cast(raw, tf.float32).numpy())
    compute = keras.mixed_precision.global_policy().compute_dtype
    assert record.heads == {"a": f"{compute} -> float32 (wrapped)", "b": f"{compute} -> float32 (wrapped)"}
    assert record.dtype == "float32 (wrapped)"


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_a_saved_and_reloaded_model_of_a_list_of_heads_answers_by_the_heads_names(policy, tmp_path):
    """Not after the float32 layers added behind them (`a_float32`): mode=eval and predict read the names back."""
    keras.mixed_precision.set_global_policy(policy)
    wrapped, _ = float32_output(_two_heads("list"), mixed=policy != "float32")
    wrapped.save(tmp_path / "model.keras")
    reloaded = keras.saving.load_model(tmp_path / "model.keras", compile=False)
    answer = reloaded(np.zeros((2, 6), "float32"))
    assert sorted(answer) == ["a", "b"]
    assert all(value.dtype == tf.float32 for value in answer.values())


def test_an_output_already_float32_is_kept_as_is_and_the_record_says_so_per_head():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = _two_heads("list", float32_head=True)
    wrapped, record = float32_output(model, mixed=True)
    assert [t.dtype for t in wrapped.outputs] == ["float32", "float32"]
    assert wrapped.outputs[1] is model.outputs[1]  # no layer added after b
    assert record.heads == {"a": "bfloat16 -> float32 (wrapped)", "b": "float32 (kept)"}
    decided = dict((key, value) for key, value, _ in record.decisions())
    assert decided["model.output_heads"] == record.heads


def test_one_output_keeps_its_plan_record_unchanged():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    inputs = keras.Input((6,))
    model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    wrapped, record = float32_output(model, mixed=True)
    assert wrapped.outputs[0].dtype == "float32" and len(wrapped.outputs) == 1
    assert record == OutputPlan.of(dtype=("float32 (wrapped)", "x"))  # same value, and no per-head field
    assert [key for key, _, _ in record.decisions()] == ["model.output_dtype"]
    assert "bfloat16" in record.reason("dtype")


def _build(builder: str, precision: str):
    cfg = config("model=custom", f"model.builder=multi_output_parts:{builder}", f"precision={precision}", *DATA)
    source = DATASETS.get(cfg.dataset.name).load(cfg.dataset, task=cfg.task.name.value)
    plan = schedule(cfg, resolve(cfg, CPU_PLAIN), source.num_train, source.num_val)
    keras.mixed_precision.set_global_policy(plan.precision.policy)
    return build(cfg, plan, source, tf.distribute.get_strategy())


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize(
    "builder, names", [("two_heads", "['a', 'b']"), ("two_heads_subclassed", "['first', 'second']")]
)
def test_a_model_with_two_outputs_is_refused_naming_them_while_the_task_has_one_head(precision, builder, names):
    with pytest.raises(ConfigError, match=rf"model\.builder='multi_output_parts:{builder}'") as err:
        _build(builder, precision)
    message = str(err.value)
    assert f"2 outputs {names}" in message and "one output" in message
    assert "task.heads" in message


def test_the_refusal_comes_before_mlflow_hears_of_the_run(cli_here, tmp_path):
    ran = cli_here("model=custom", "model.builder=multi_output_parts:two_heads", "precision=bf16", *DATA)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "2 outputs ['a', 'b']" in ran.stdout + ran.stderr
    assert "Traceback" not in ran.stdout + ran.stderr
    assert runs_in(tmp_path / "mlflow.db") == []


def test_a_wrapped_two_head_model_reloads_from_keras_with_both_float32_heads(tmp_path):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    wrapped, _ = float32_output(_two_heads("dict"), mixed=True)
    wrapped.save(tmp_path / "model.keras")
    reloaded = keras.saving.load_model(tmp_path / "model.keras", compile=False)
    x = np.random.default_rng(1).normal(size=(4, 6)).astype("float32")
    before, after = wrapped(x), reloaded(x)
    assert sorted(after) == ["a", "b"] and all(after[k].dtype == tf.float32 for k in after)
    for k in ("a", "b"):
        np.testing.assert_array_equal(after[k].numpy(), before[k].numpy())
