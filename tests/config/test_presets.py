"""experiment= and debug= presets: every file composes and resolves; debug presets shrink the run as they say."""

from __future__ import annotations

import pytest
from fakes import CPU_PLAIN
from support.config import CONF_DIR, config

from launcher.plan.resolve import resolve
from launcher.plan.schedule import schedule

PRESETS = [
    f"{group}={path.stem}" for group in ("experiment", "debug") for path in sorted((CONF_DIR / group).glob("*.yaml"))
]


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_composes_and_resolves(preset):
    resolve(config(preset), CPU_PLAIN)  # a ConfigError would name the key


def test_an_experiment_pins_groups_and_values_and_the_command_line_still_wins():
    cfg = config("experiment=digits_cnn_mixed", "train.epochs=2")
    assert (cfg.model.name, cfg.precision.name.value, cfg.strategy.kind.value, cfg.xla) == (
        "cnn",
        "mixed",
        "mirrored",
        "true",
    )
    assert cfg.train.epochs == 2 and cfg.checkpoint.monitor == "val_accuracy" and cfg.name == "digits-cnn-mixed"


def steps(*overrides):
    cfg = config(*overrides)
    plan = schedule(cfg, resolve(cfg, CPU_PLAIN), 1438, 359)
    return plan.schedule.steps_per_epoch, plan.schedule.validation_steps, cfg.train.epochs


def test_debug_presets_shrink_the_run():
    assert steps() == (22, 6, 5)  # 1438 // 64, whole batches
    assert steps("debug=fast") == (1, 1, 1)
    # debug=fast times nothing and writes nothing a person did not ask for; asked for, it is written.
    fast = config("debug=fast")
    assert not (fast.train.remeasure_matmul or fast.train.measure_utilization or fast.checkpoint.enabled)
    assert not fast.checkpoint.export_model and fast.checkpoint.monitor == ""
    assert config("debug=fast", "checkpoint.export_model=true").checkpoint.export_model
    assert steps("debug=limit") == (2, 1, 2)  # a tenth of 22 and of 6 steps, rounded, at least 1
    cfg = config("debug=overfit")
    assert (cfg.dataset.limit, cfg.train.epochs, cfg.checkpoint.enabled) == (128, 60, False)
