"""The moving-average warning (`launcher.plan.rules.batch_norm`), with fake facts: each layer's momentum and the
run's steps. The issue's case: model=cnn on the digits, 22 steps x 5 epochs at Keras's default momentum 0.99,
validation accuracy 0.22 against training's 0.95."""

from __future__ import annotations

import pytest

from launcher.plan.rules.batch_norm import moving_average_warning, steps_to_settle

CNN = {"bn_0": 0.99, "bn_1": 0.99}


def test_the_default_cnn_on_the_digits_is_warned_with_the_steps_it_needs_and_both_fixes():
    warning = moving_average_warning(CNN, total_steps=110, steps_per_epoch=22)
    assert warning is not None
    assert "BatchNormalization (bn_0, bn_1) with momentum 0.99 needs about 300 training steps" in warning
    assert "this run has 110" in warning
    # More steps (whole epochs of this run's size), or a momentum that settles in 110 steps: 3 / (1 - 0.97) = 100.
    assert "Fix: train.epochs=14 (>= 300 steps)" in warning
    assert "keras.layers.BatchNormalization(momentum=0.97) settles in 110 steps" in warning


@pytest.mark.parametrize(
    ("momenta", "steps"),
    [
        (CNN, 300),  # exactly enough
        ({"bn": 0.9}, 30),  # a faster average settles in 30 steps
        ({}, 5),  # no BatchNormalization
    ],
)
def test_a_run_long_enough_for_its_moving_averages_is_not_warned(momenta, steps):
    assert moving_average_warning(momenta, total_steps=steps, steps_per_epoch=10) is None


def test_the_slowest_layer_decides_and_many_layers_are_named_briefly():
    momenta = {f"block{i}/bn": 0.99 for i in range(5)} | {"head/bn": 0.999, "fast/bn": 0.9}  # 0.9: 30 steps, enough
    warning = moving_average_warning(momenta, total_steps=100, steps_per_epoch=50)
    assert "momentum 0.999 needs about 3000 training steps" in warning and "train.epochs=60" in warning
    assert "(block0/bn, block1/bn, block2/bn and 3 more)" in warning and "fast/bn" not in warning


def test_a_run_too_short_for_any_momentum_worth_the_name_is_told_to_train_longer():
    warning = moving_average_warning({"bn": 0.99}, total_steps=2, steps_per_epoch=1)
    assert warning.endswith("Fix: train.epochs=300 (>= 300 steps).")
    assert steps_to_settle(0.99) == 300 and steps_to_settle(0.9) == 30
