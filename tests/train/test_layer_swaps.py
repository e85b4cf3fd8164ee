"""The swaps through the real build: the CNN's BatchNormalization layers and the transformer's GELU Dense layers run
fused and the Plan lists them, off leaves them stock, and over 200 steps each swapped model's loss curve stays on the
stock one's.

Tolerance of the curve (stated, per precision): every epoch's mean training loss (10 steps each) within `CURVE_RTOL`
of the stock run's, relative. Measured on the CNN (Intel Xeon with AMX): fp32 1.6e-7 (the kernels' order of
summation), bf16 2.7e-3 and mixed float16 3.5e-3 (outputs rounded to 8 or 11 bits, so two summation orders drift
apart; the same order as bf16's own distance from the fp32 curve, ~1e-3). On the transformer LM: fp32 1.6e-7, bf16
3.2e-4, mixed float16 4.7e-5 (the cluster rounds once where Keras rounds twice). fp32's trained model also predicts
as the stock one does; a low-precision run's weights after 200 steps are another trajectory, compared by loss only.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from support.config import config

from launcher.plan.decisions import SwappedLayersPlan
from launcher.train.fused_activation import FusedActivationDense
from launcher.train.fused_batch_norm import FusedBatchNormalization

CURVE_RTOL = {"fp32": 1e-5, "bf16": 1e-2, "mixed": 1e-2}
QUIET = ["tracking.enabled=false", "checkpoint.enabled=false", "checkpoint.export_model=false", "xla=false"]
CNN = ["model=cnn", "dataset=digits", "model.filters=[8,16]", "model.dense_units=16", "scaling.batch_size=32"]
# A one-layer causal transformer on synthetic next-token data (it learns: the loss falls from 3.6 to 0.45 in 200 steps)
LM = [
    *("model=transformer", "task=sequence", "dataset=synthetic", "dataset.kind=tokens", "dataset.vocab_size=32"),
    *("dataset.shape=[16]", "dataset.num_examples=400", "scaling.batch_size=16"),
    *("model.embed_dim=32", "model.num_heads=2", "model.ff_dim=64", "model.num_layers=1"),
]
MODELS = {"cnn": CNN, "lm": LM}


def launch(tmp_path, *overrides, model="cnn"):
    from launcher.launch.training import TrainingLaunch

    run = TrainingLaunch(config(*QUIET, *MODELS[model], *overrides), tmp_path / "run", tmp_path, {})
    run.prepare()
    run.build()
    return run


def bn_types(model) -> dict[str, type]:
    return {layer.name: type(layer) for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)}


def test_the_cnn_is_built_with_fused_batch_norm_and_the_plan_lists_each_layer(tmp_path):
    run = launch(tmp_path, "precision=fp32")
    assert bn_types(run.context.built.model) == {"bn_0": FusedBatchNormalization, "bn_1": FusedBatchNormalization}
    record = run.context.plan.record(SwappedLayersPlan)
    assert sorted(record.swapped) == ["bn_0", "bn_1"] and record.kept is None
    assert "4-D channels-last" in record.swapped["bn_0"]
    assert run.context.plan.values()["model.swapped_layers"] == record.swapped
    assert "model.swapped_layers" in (tmp_path / "run" / "plan.yaml").read_text()
    twin = run.context.built.rebuild().model  # the twin a checkpoint is verified in is swapped alike
    assert set(bn_types(twin).values()) == {FusedBatchNormalization}


def test_off_builds_the_stock_layers_and_records_nothing(tmp_path):
    run = launch(tmp_path, "precision=fp32", "model.layer_swaps=off")
    assert set(bn_types(run.context.built.model).values()) == {keras.layers.BatchNormalization}
    assert not run.context.plan.has(SwappedLayersPlan)
    assert run.context.plan.values()["model.layer_swaps"] == "off"


def test_the_transformer_s_gelu_layers_are_swapped_and_the_others_left_stock(tmp_path):
    run = launch(tmp_path, "precision=bf16", "model.num_layers=2", model="lm")
    record = run.context.plan.record(SwappedLayersPlan)
    assert sorted(record.swapped) == ["ff_in_0", "ff_in_1"] and record.kept is None
    assert record.swapped["ff_in_0"].startswith("bias add and gelu as one compiled float32 cluster")
    dense = {
        layer.name: type(layer) for layer in run.context.built.model.layers if isinstance(layer, keras.layers.Dense)
    }
    assert dense["ff_in_0"] is FusedActivationDense and dense["ff_out_0"] is keras.layers.Dense
    stock = launch(tmp_path / "off", "precision=bf16", "model.layer_swaps=off", model="lm").context.built.model
    assert not any(type(layer) is FusedActivationDense for layer in stock._flatten_layers())


def curve(tmp_path, precision, swaps, model="cnn"):
    from launcher.train.engine import Engine, EngineSettings

    steps = ("train.epochs=20", "train.max_steps_per_epoch=10")
    run = launch(tmp_path / swaps, f"precision={precision}", f"model.layer_swaps={swaps}", *steps, model=model)
    assert run.context.plan.schedule.total_steps == 200
    engine = Engine(run.context.built, run.context.plan, run.context.source, EngineSettings(verbose=0))
    result = engine.fit(20)
    keras.mixed_precision.set_global_policy("float32")
    return np.array([epoch.logs["loss"] for epoch in result.epochs]), run.context.built.model


@pytest.mark.slow  # two trainings of 200 steps, seconds of CPU in this process
@pytest.mark.parametrize("precision", ["fp32", "bf16", "mixed"])
def test_a_swapped_cnn_s_loss_curve_stays_on_the_stock_one_over_200_steps(tmp_path, precision):
    stock, stock_model = curve(tmp_path, precision, "off")
    fused, fused_model = curve(tmp_path, precision, "auto")
    assert len(stock) == len(fused) == 20
    assert stock[-1] < 0.7 * stock[0]  # it learned: the curves compared are not flat
    np.testing.assert_allclose(fused, stock, rtol=CURVE_RTOL[precision])
    if precision == "fp32":
        x = np.random.default_rng(0).uniform(0, 16, size=(16, 8, 8, 1)).astype("float32")
        want = np.asarray(stock_model(x, training=False))
        np.testing.assert_allclose(fused_model(x, training=False), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.slow  # two trainings of 200 steps, seconds of CPU in this process
@pytest.mark.parametrize("precision", ["fp32", "bf16", "mixed"])
def test_a_swapped_transformer_s_loss_curve_stays_on_the_stock_one_over_200_steps(tmp_path, precision):
    stock, stock_model = curve(tmp_path, precision, "off", model="lm")
    fused, fused_model = curve(tmp_path, precision, "auto", model="lm")
    assert len(stock) == len(fused) == 20
    assert stock[-1] < 0.3 * stock[0]  # it learned: the curves compared are not flat
    np.testing.assert_allclose(fused, stock, rtol=CURVE_RTOL[precision])
    if precision == "fp32":
        tokens = np.random.default_rng(0).integers(0, 32, size=(8, 16))
        want = np.asarray(stock_model(tokens, training=False))
        np.testing.assert_allclose(fused_model(tokens, training=False), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
