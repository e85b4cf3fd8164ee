"""Side by side: stock Keras fails on float16 + MirroredStrategy + XLA here; the launcher trains."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from support.config import TINY, compose

from launcher.launch.training import execute
from launcher.train.loss_scale import ReplicaSafeLossScaleOptimizer


@pytest.fixture
def mixed_policy():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def test_stock_model_fit_with_jit_compile_fails_under_mirrored(mixed_policy):
    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(128, 8)).astype("float32"), rng.integers(0, 4, size=128)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(4, dtype="float32")]
        )
        model.compile(
            optimizer=keras.optimizers.Adam(),
            jit_compile=True,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    with pytest.raises(Exception, match="Trying to access resource|merge_call"):
        model.fit(x, y, batch_size=32, epochs=1, verbose=0)


@pytest.mark.slow  # a full training, seconds of CPU in this process
def test_launcher_trains_the_same_combination(tmp_path):
    cfg = compose(
        *TINY,
        "precision=mixed",
        "strategy=mirrored",
        "xla=true",
        "tracking.enabled=false",
        "checkpoint.enabled=false",
        "checkpoint.export_model=false",
    )
    outcome = execute(cfg, tmp_path / "run", tmp_path)
    assert outcome.error is None
    assert type(outcome.model.optimizer) is ReplicaSafeLossScaleOptimizer  # built, not only planned
    assert outcome.plan.step.kind == "replica_xla"
    losses = [e.logs["loss"] for e in outcome.result.epochs]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
