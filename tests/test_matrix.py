"""precision x strategy x XLA: every cell trains through the real config, resolver, build and engine."""

from __future__ import annotations

import math

import keras
import pytest
from conftest import TINY, compose

from launcher.run.runner import execute
from launcher.train.fused_update import FusedAdam
from launcher.train.loss_scale import ReplicaSafeLossScaleOptimizer


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
    assert plan["replicas"] == (2 if strategy == "mirrored" else 1)
    assert plan["xla"] is (xla == "true")
    # The update is fused unless XLA compiles it with the whole step (one replica).
    whole_step_compiled = xla == "true" and strategy == "default"
    assert plan["optimizer.update"] == ("keras" if whole_step_compiled else "fused")
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
