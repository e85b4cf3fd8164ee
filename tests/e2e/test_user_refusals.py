"""What the launcher refuses about a user's model, and the doctor's own refusal, checked in-process."""

from __future__ import annotations

import pytest
from fakes import CPU_PLAIN
from support.config import compose, config

from launcher.config.errors import ConfigError
from launcher.outcome import EXIT_REFUSED, REFUSED, OutcomeRecord
from launcher.plan.resolve import resolve
from launcher.plan.schedule import schedule
from launcher.train.registry import DATASETS, MODELS

DATA = ["dataset=synthetic", "dataset.kind=tabular", "dataset.shape=[6]", "dataset.num_examples=256"]


def _source(cfg):
    return DATASETS.get(cfg.dataset.name).load(cfg.dataset, task=cfg.task.name.value)


def test_an_output_that_does_not_fit_the_task_is_refused_naming_the_builder():
    cfg = config("model=custom", "model.builder=user_parts:wrong_width", *DATA)
    with pytest.raises(ConfigError, match=r"model\.builder='user_parts:wrong_width'") as err:
        MODELS.get("custom").build(cfg.model, _source(cfg))
    assert "yours is (None, 11)" in str(err.value) and "Dense(spec.outputs)" in str(err.value)


def test_a_model_whose_variables_were_created_outside_the_strategy_scope_is_refused():
    import tensorflow as tf
    import user_parts

    from launcher.train.build import build

    cfg = config("model=custom", "model.builder=user_parts:cached", "strategy=mirrored", *DATA)
    source = _source(cfg)
    plan = schedule(cfg, resolve(cfg, CPU_PLAIN), source.num_train, source.num_val)
    user_parts.CACHED.clear()
    from launcher.train.model_io import ModelSpec

    user_parts.cached(ModelSpec.of(source))  # built here, outside any strategy's scope
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with pytest.raises(ConfigError, match=r"(?s)model\.builder=.*created inside the strategy scope"):
        build(cfg, plan, source, strategy)
    user_parts.CACHED.clear()  # built fresh inside the scope on every call: accepted
    assert build(cfg, plan, source, strategy).model is not None


def test_the_doctor_refuses_what_it_cannot_examine_with_exit_2_and_a_refused_record(tmp_path):
    from launcher.doctor.doctor_mode import launch

    node = compose("mode=doctor", "strategy=multi_worker", "strategy.workers=[127.0.0.1:7001,127.0.0.1:7002]")
    assert launch(node, tmp_path, tmp_path) == EXIT_REFUSED
    record = OutcomeRecord.read(tmp_path)
    assert record is not None and record.status == REFUSED and record.mode == "doctor"
    assert "strategy=mirrored strategy.devices=" in record.error
