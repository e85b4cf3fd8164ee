"""precision x strategy x XLA: every cell trains through the real config, resolver, build and engine."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
from support.config import TINY, compose

from launcher.launch.training import execute
from launcher.train.fused_update import FusedAdam
from launcher.train.loss_scale import ReplicaSafeLossScaleOptimizer


@pytest.mark.slow  # a training per precision x XLA cell, seconds of CPU in this process
@pytest.mark.parametrize("xla", ["false", "true"])
@pytest.mark.parametrize("strategy", ["default", "mirrored"])
@pytest.mark.parametrize("precision", ["fp32", "mixed", "bf16"])
def test_every_combination_trains_and_loss_decreases(precision, strategy, xla, tmp_path):
    cfg = compose(
        *TINY,
        f"precision={precision}",
        f"strategy={strategy}",
        f"xla={xla}",
        "train.epochs=3",
        "optimizer.learning_rate=0.01",
        "tracking.enabled=false",
        "checkpoint.enabled=false",
        "checkpoint.export_model=false",
    )
    outcome = execute(cfg, tmp_path / "run", tmp_path)
    assert outcome.error is None
    plan = outcome.plan
    assert plan.strategy.replicas == (2 if strategy == "mirrored" else 1)
    assert plan.step.xla is (xla == "true")
    # The update is fused unless XLA compiles it with the whole step (one replica).
    whole_step_compiled = xla == "true" and strategy == "default"
    assert plan.step.update == ("keras" if whole_step_compiled else "fused")
    adam = keras.optimizers.Adam if whole_step_compiled else FusedAdam
    optimizer = outcome.model.optimizer  # what was built and trained with, not only what the Plan says
    if precision == "mixed":
        expected = ReplicaSafeLossScaleOptimizer if strategy == "mirrored" else keras.optimizers.LossScaleOptimizer
        assert type(optimizer) is expected
        assert type(optimizer.inner_optimizer) is adam
    else:
        assert type(optimizer) is adam
    losses = [epoch.logs["loss"] for epoch in outcome.result.epochs]
    assert len(losses) == 3
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < losses[0] * 0.8, losses
    assert outcome.result.final["val_accuracy"] > 0.5


@pytest.mark.slow  # a training per precision x XLA cell, seconds of CPU in this process
@pytest.mark.parametrize("xla", ["false", "true"])
@pytest.mark.parametrize("strategy", ["default", "mirrored"])
@pytest.mark.parametrize("precision", ["fp32", "mixed", "bf16"])
def test_big_batch_knobs_work_in_every_combination(precision, strategy, xla, tmp_path):
    """Gradient accumulation, clipping after the all-reduce and the weights' moving average, together, in every
    cell (float16 + mirrored + XLA with the replica-safe loss-scale optimizer included)."""
    from launcher.train.clipping import _ClipAfterAllReduce
    from launcher.train.ema import ema_optimizer

    cfg = compose(
        *TINY,
        f"precision={precision}",
        f"strategy={strategy}",
        f"xla={xla}",
        "train.epochs=1",
        "train.max_steps_per_epoch=8",
        "optimizer.learning_rate=0.01",
        "optimizer.gradient_accumulation_steps=2",
        "optimizer.global_clipnorm=1.0",
        "optimizer.use_ema=true",
        "tracking.enabled=false",
        "checkpoint.enabled=false",
        "checkpoint.export_model=false",
    )
    outcome = execute(cfg, tmp_path / "run", tmp_path)
    assert outcome.error is None
    plan = outcome.plan
    assert plan.batch.accumulation == 2 and plan.numerics.global_clipnorm == 1.0
    assert plan.numerics.ema_momentum == 0.99
    inner = ema_optimizer(outcome.model.optimizer)
    assert isinstance(inner, _ClipAfterAllReduce) and inner.clip_global == 1.0
    averages = [a.numpy() for a in inner._model_variables_moving_average]
    trained = [v.numpy() for v in outcome.model.trainable_variables]
    assert all(np.isfinite(a).all() for a in averages)
    assert any(not np.array_equal(a, t) for a, t in zip(averages, trained, strict=True))  # an average, not a copy
    final = outcome.result.final
    assert math.isfinite(final["loss"]) and math.isfinite(final["val_loss"])
