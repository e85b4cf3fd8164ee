"""A two-input, two-head model with sample weights and class weights trains in-process through the real config,
resolver, build and engine: every head's metrics in the history, every loss finite."""

from __future__ import annotations

import math

import pytest
from support.config import TINY, compose

from launcher.launch.training import execute

HEADS = (
    "+task.heads={kind: {name: classification, metrics: [accuracy], class_weight: balanced}, "
    "size: {name: regression, loss_weight: 0.5, metrics: [mae]}}"
)
NAMES = ["loss", "kind_loss", "kind_accuracy", "size_loss", "size_mae"]


@pytest.mark.slow  # a short training per cell, seconds of CPU in this process
@pytest.mark.parametrize(
    "cell",
    [["precision=mixed", "strategy=mirrored", "xla=true"], ["precision=bf16", "strategy=mirrored", "xla=false"]],
    ids=["mixed-mirrored-xla", "bf16-mirrored"],
)
@pytest.mark.parametrize("builder", ["build", "build_list"])
def test_two_inputs_two_heads_sample_and_class_weights_train(cell, builder, tmp_path):
    cfg = compose(
        *[o for o in TINY if not o.startswith("model.")],
        "model=custom",
        f"model.builder=heads_parts:{builder}",
        "dataset=custom",
        "dataset.loader=heads_parts:load",
        HEADS,
        *cell,
        "tracking.enabled=false",
        "checkpoint.enabled=false",
        "checkpoint.export_model=false",
    )
    outcome = execute(cfg, tmp_path / "run", tmp_path)
    assert outcome.error is None
    assert outcome.result.epochs, "no epoch ran"
    for epoch in outcome.result.epochs:
        for name in NAMES:
            for logged in (name, f"val_{name}"):
                assert logged in epoch.logs, (logged, sorted(epoch.logs))
                assert math.isfinite(epoch.logs[logged]), (logged, epoch.logs[logged])
    plan = outcome.plan.values()
    assert set(plan["model.output_heads"]) == {"kind", "size"}
    weights = plan["task.class_weights"]["kind"]
    assert len(weights) == 3 and weights[2] > weights[0]  # class 2 is the rare one
    assert plan["task.heads"]["size"]["loss_weight"] == 0.5
