"""The engine drives standard Keras callbacks and reports what a person needs."""

from __future__ import annotations

import pytest
from conftest import TINY, compose

from launcher.app import execute

QUIET = ["tracking.enabled=false", "checkpoint.enabled=false", "checkpoint.export_model=false", "precision=fp32"]


def run(tmp_path, *overrides):
    outcome = execute(compose(*TINY, *QUIET, *overrides), tmp_path / "run", tmp_path)
    assert outcome.error is None
    return outcome


def test_early_stopping_stops_the_run(tmp_path):
    # mode=max on a falling val_loss: "no improvement" after the first epoch.
    outcome = run(tmp_path, "train.epochs=6", "train.early_stopping.enabled=true",
                  "train.early_stopping.patience=1", "train.early_stopping.mode=max")
    assert len(outcome.result.epochs) == 2
    assert outcome.result.stopped_early


def test_reduce_lr_on_plateau_lowers_the_learning_rate(tmp_path):
    outcome = run(tmp_path, "train.epochs=3", "train.reduce_lr_on_plateau.enabled=true",
                  "train.reduce_lr_on_plateau.patience=0", "train.reduce_lr_on_plateau.mode=max",
                  "train.reduce_lr_on_plateau.factor=0.5", "optimizer.learning_rate=0.002")
    # Logged per epoch: the rate that epoch trained with. Epoch 1 sets the best value,
    # epochs 2 and 3 "do not improve", each halving the rate for what follows.
    rates = [e.logs["learning_rate"] for e in outcome.result.epochs]
    assert rates == pytest.approx([0.002, 0.002, 0.001])


def test_terminate_on_nan_stops_a_diverging_run(tmp_path):
    outcome = run(tmp_path, "train.epochs=5", "optimizer.name=sgd", "optimizer.learning_rate=1e12",
                  "optimizer.momentum=0.0")
    assert outcome.result.stopped_early
    assert len(outcome.result.epochs) < 5


def test_warmup_and_linear_scaling_drive_the_learning_rate(tmp_path):
    outcome = run(tmp_path, "strategy=mirrored", "scaling=linear", "scaling.batch_size=32",
                  "scaling.reference_batch=32", "scaling.warmup_epochs=1", "optimizer.learning_rate=0.001",
                  "train.epochs=2")
    plan = outcome.plan
    assert plan["lr"] == pytest.approx(0.002)
    assert plan["warmup.steps"] == plan["train.steps_per_epoch"]
    assert outcome.result.epochs[-1].logs["learning_rate"] == pytest.approx(0.002)


def test_cosine_schedule_decays(tmp_path):
    outcome = run(tmp_path, "optimizer.schedule=cosine", "train.epochs=3", "optimizer.learning_rate=0.01")
    rates = [e.logs["learning_rate"] for e in outcome.result.epochs]
    assert rates[0] > rates[1] > rates[2]


def test_examples_per_second_and_loss_scale_are_reported(tmp_path):
    outcome = execute(compose(*TINY, "tracking.enabled=false", "checkpoint.enabled=false",
                              "checkpoint.export_model=false", "precision=mixed", "xla=false"), tmp_path / "r", tmp_path)
    logs = outcome.result.final
    assert logs["examples_per_sec"] > 0
    assert logs["loss_scale"] == 32768.0
