"""Gradient accumulation: k micro-batches of b per step update the weights as one batch of k*b does."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import compose, config
from fakes import CPU_PLAIN

from launcher.config.errors import ConfigError
from launcher.plan.resolve import resolve
from launcher.run.runner import execute

# SGD without momentum: the update is the learning rate times the gradient, so a wrong average shows.
ONE_STEP = ["model.hidden_units=[32]", "optimizer.name=sgd", "optimizer.momentum=0.0", "optimizer.learning_rate=0.5",
            "train.epochs=1", "train.max_steps_per_epoch=2", "tracking.enabled=false", "checkpoint.enabled=false",
            "checkpoint.export_model=false"]


def trained(tmp_path, name: str, *overrides: str):
    outcome = execute(compose(*ONE_STEP, *overrides), tmp_path / name, tmp_path)
    assert outcome.error is None, outcome.error
    assert outcome.result.final["skipped_steps"] == 0  # both steps applied: the comparison means something
    return outcome


def distance(a, b) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("setup", [
    ["precision=mixed", "strategy=mirrored", "xla=true"],
    ["precision=fp32", "strategy=default", "xla=false"],
], ids=["float16-mirrored-xla", "float32-one-device"])
def test_k_micro_batches_update_like_one_batch_of_k_times_b(tmp_path, setup):
    accumulated = trained(tmp_path, "k4", *setup, "scaling.batch_size=16", "optimizer.gradient_accumulation_steps=4")
    whole = trained(tmp_path, "whole", *setup, "scaling.batch_size=64")
    small = trained(tmp_path, "small", *setup, "scaling.batch_size=16")  # negative control: a quarter of the data
    plan = accumulated.plan
    assert plan["batch.micro"] == 16 and plan["batch.per_replica"] == 64
    assert plan["batch.global"] == whole.plan["batch.global"]
    same = distance(accumulated.model.get_weights(), whole.model.get_weights())
    other = distance(accumulated.model.get_weights(), small.model.get_weights())
    tolerance = 2e-4 if "precision=mixed" in setup else 1e-6  # measured: 1.4e-5 and 3e-8; float16 rounds more
    assert same < tolerance, (same, other)
    assert other > 20 * tolerance


def test_the_plan_scales_the_learning_rate_with_the_effective_batch_and_drops_ragged_batches():
    plan = resolve(config("strategy=mirrored", "scaling=linear", "scaling.batch_size=16", "scaling.reference_batch=32",
                          "optimizer.learning_rate=0.1", "optimizer.gradient_accumulation_steps=4", "xla=false"),
                   CPU_PLAIN)
    assert plan["batch.micro"] == 16 and plan["batch.per_replica"] == 64 and plan["batch.global"] == 128
    assert plan["lr"] == pytest.approx(0.1 * 128 / 32)
    assert plan["batch.drop_remainder"] is True and plan["gradient_accumulation"] == 4


def test_accumulation_below_one_is_refused_with_the_fix():
    with pytest.raises(ConfigError) as refused:
        resolve(config("optimizer.gradient_accumulation_steps=0"), CPU_PLAIN)
    assert "optimizer.gradient_accumulation_steps=1" in str(refused.value)
