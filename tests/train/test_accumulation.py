"""Gradient accumulation: k micro-batches of b per step update the weights as one batch of k*b does."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import CPU_PLAIN
from support.config import compose, config

from launcher.config.errors import ConfigError
from launcher.launch.training import execute
from launcher.plan.resolve import resolve

# SGD without momentum: the update is the learning rate times the gradient, so a wrong average shows.
ONE_STEP = [
    "model.hidden_units=[32]",
    "optimizer.name=sgd",
    "optimizer.momentum=0.0",
    "optimizer.learning_rate=0.5",
    "train.epochs=1",
    "train.max_steps_per_epoch=2",
    "train.max_validation_steps=1",  # validation never moves the weights these tests compare
    "tracking.enabled=false",
    "checkpoint.enabled=false",
    "checkpoint.export_model=false",
]


def trained(tmp_path, name: str, *overrides: str):
    outcome = execute(compose(*ONE_STEP, *overrides), tmp_path / name, tmp_path)
    assert outcome.error is None, outcome.error
    assert outcome.result.final["skipped_steps"] == 0  # both steps applied: the comparison means something
    return outcome


def built_weights(run_dir, *overrides: str) -> list:
    """The weights a launch starts training from (the same seeded build), without training it."""
    from launcher.launch.training import TrainingLaunch

    launch = TrainingLaunch(config(*ONE_STEP, *overrides), run_dir, run_dir.parent, {})
    launch.prepare()
    launch.build()
    return launch.context.built.model.get_weights()


def distance(a, b) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


@pytest.mark.slow  # two trainings per case, seconds of CPU in this process
@pytest.mark.parametrize(
    "setup",
    [
        ["precision=mixed", "strategy=mirrored", "xla=true"],
        ["precision=fp32", "strategy=default", "xla=false"],
    ],
    ids=["float16-mirrored-xla", "float32-one-device"],
)
def test_k_micro_batches_update_like_one_batch_of_k_times_b(tmp_path, setup):
    accumulated = trained(tmp_path, "k4", *setup, "scaling.batch_size=16", "optimizer.gradient_accumulation_steps=4")
    whole = trained(tmp_path, "whole", *setup, "scaling.batch_size=64")
    small = trained(tmp_path, "small", *setup, "scaling.batch_size=16")  # negative control: a quarter of the data
    plan = accumulated.plan
    assert plan.batch.micro == 16 and plan.batch.per_replica == 64
    assert plan.batch.global_batch == whole.plan.batch.global_batch
    same = distance(accumulated.model.get_weights(), whole.model.get_weights())
    other = distance(accumulated.model.get_weights(), small.model.get_weights())
    tolerance = 2e-4 if "precision=mixed" in setup else 1e-6  # measured: 1.4e-5 and 3e-8; float16 rounds more
    assert same < tolerance, (same, other)
    assert other > 20 * tolerance


def test_the_plan_scales_the_learning_rate_with_the_effective_batch_and_drops_ragged_batches():
    plan = resolve(
        config(
            "strategy=mirrored",
            "scaling=linear",
            "scaling.batch_size=16",
            "scaling.reference_batch=32",
            "optimizer.learning_rate=0.1",
            "optimizer.gradient_accumulation_steps=4",
            "xla=false",
        ),
        CPU_PLAIN,
    )
    assert plan.batch.micro == 16 and plan.batch.per_replica == 64 and plan.batch.global_batch == 128
    assert plan.learning_rate.peak == pytest.approx(0.1 * 128 / 32)
    assert plan.batch.drop_remainder is True and plan.batch.accumulation == 4


def test_accumulation_below_one_is_refused_with_the_fix():
    with pytest.raises(ConfigError) as refused:
        resolve(config("optimizer.gradient_accumulation_steps=0"), CPU_PLAIN)
    assert "optimizer.gradient_accumulation_steps=1" in str(refused.value)


# ------------------------------------------------------ clipping and EMA


@pytest.mark.slow  # two replicas: a multi-device run
@pytest.mark.parametrize(
    "precision", [["precision=mixed", "xla=true"], ["precision=fp32", "xla=false"]], ids=["float16-xla", "float32"]
)
def test_global_clipnorm_clips_the_all_reduced_gradient_as_one_device_does(tmp_path, precision):
    """Two replicas of 32 clip the gradient of the global batch of 64, as one device with 64 does (Keras would
    clip each replica's half before summing: a different update). lr 0.5 x clip 0.01 bounds each step's move."""
    clip = "optimizer.global_clipnorm=0.01"
    mirrored = trained(tmp_path, "mirrored", *precision, "strategy=mirrored", "scaling.batch_size=32", clip)
    single = trained(tmp_path, "single", *precision, "strategy=default", "scaling.batch_size=64", clip)
    free = trained(tmp_path, "free", *precision, "strategy=mirrored", "scaling.batch_size=32")  # negative control
    assert "after the all-reduce" in mirrored.plan.numerics.reason("global_clipnorm")
    initial = built_weights(tmp_path / "initial", *precision)
    moved = np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(mirrored.model.get_weights(), initial, strict=True)))
    assert moved <= 2 * 0.5 * 0.01 * 1.001  # two steps, each at most lr x clip
    same = distance(mirrored.model.get_weights(), single.model.get_weights())
    other = distance(mirrored.model.get_weights(), free.model.get_weights())
    tolerance = 1e-4 if "precision=mixed" in precision else 1e-6
    assert same < tolerance, (same, other)
    assert other > 20 * tolerance


@pytest.mark.slow  # two replicas: a multi-device run
def test_the_exported_model_holds_the_moving_average_of_the_weights(tmp_path):
    """float16 + mirrored + XLA (replica-safe loss scaling): after two steps the average is m*w1 + (1-m)*w2
    (Keras starts it at the first step's weights), the same on both replicas, and it is what model.keras holds."""
    import keras

    from launcher.train.ema import ema_optimizer

    setup = [
        "precision=mixed",
        "strategy=mirrored",
        "xla=true",
        "optimizer.use_ema=true",
        "optimizer.ema_momentum=0.5",
        "checkpoint.export_model=true",
    ]
    run = trained(tmp_path, "ema", *setup)
    first = execute(
        compose(*ONE_STEP, *setup, "train.max_steps_per_epoch=1", "checkpoint.export_model=false"),
        tmp_path / "first",
        tmp_path,
    ).model.get_weights()
    final = run.model.get_weights()  # the trained weights: the engine swaps the average in only to evaluate/export
    exported = keras.saving.load_model(tmp_path / "ema" / "model.keras").get_weights()
    averages = ema_optimizer(run.model.optimizer)._model_variables_moving_average
    for average in averages:
        copies = [v.numpy() for v in average.value.values]
        np.testing.assert_array_equal(copies[0], copies[1])
    expected = [0.5 * w1 + 0.5 * w2 for w1, w2 in zip(first, final, strict=True)]
    assert distance(exported, expected) < 1e-6
    assert distance(exported, [a.numpy() for a in averages]) == 0.0
    assert distance(exported, final) > 1e-4
    assert "best model and the exported model" in run.plan.numerics.reason("ema_momentum")
