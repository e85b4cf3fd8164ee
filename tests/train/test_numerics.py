"""Per-step numerics telemetry and the guard that stops a collapsing run with a diagnosis.

What the compiled step counts, as the engine reads it: `launcher.train.step_stats`.
"""

from __future__ import annotations

import math

import broken_models
import pytest
from mlflow.tracking import MlflowClient
from support.config import TINY, compose

from launcher.launch.training import execute
from launcher.train.numerics import ChunkTelemetry, NumericsGuard, NumericsStop


def chunk(**kw) -> ChunkTelemetry:
    defaults = dict(
        first_step=1,
        ran=4,
        skipped=0,
        skip_streak=0,
        floor_streak=0,
        grad_norm=1.0,
        nonfinite_loss_step=None,
        losses=[1.0] * 4,
        scales=[],
        skips=[False] * 4,
    )
    return ChunkTelemetry(**{**defaults, **kw})


# ------------------------------------------------------------------ the guard's rules (pure)


def test_a_nonfinite_loss_stops_at_its_step_under_stop():
    guard = NumericsGuard(on_nonfinite="stop", collapse_steps=20, precision="mixed")
    with pytest.raises(NumericsStop) as stop:
        guard.check(
            chunk(first_step=9, ran=3, nonfinite_loss_step=11, nonfinite_loss_value=math.nan, scales=[8.0, 8.0, 4.0])
        )
    assert stop.value.kind == "nonfinite_loss" and stop.value.step == 11
    text = str(stop.value)
    assert "NaN at global step 11" in text and "loss scale 4" in text
    assert "mode=doctor" in text and "precision.float32_layers" in text


def test_skip_mode_runs_on_past_a_nonfinite_loss_until_the_streak_limit():
    guard = NumericsGuard(on_nonfinite="skip", collapse_steps=5)
    guard.check(chunk(nonfinite_loss_step=2, skip_streak=4))  # 4 < 5: runs on
    with pytest.raises(NumericsStop) as stop:
        guard.check(chunk(first_step=5, ran=4, skip_streak=5))
    assert stop.value.kind == "skipped_steps" and stop.value.step == 8
    assert "global steps 4-8" in str(stop.value)
    assert "train.on_nonfinite=skip" not in str(stop.value)  # already skipping: not offered again


def test_a_scale_sitting_at_its_minimum_stops_only_under_dynamic_scaling():
    at_floor = chunk(floor_streak=30, scales=[1.0] * 4)
    NumericsGuard(collapse_steps=20, min_scale=None).check(at_floor)  # fixed / no scaling: no floor rule
    with pytest.raises(NumericsStop) as stop:
        NumericsGuard(collapse_steps=20, min_scale=1.0, precision="mixed").check(at_floor)
    assert stop.value.kind == "scale_at_minimum" and "minimum (1)" in str(stop.value)


def test_collapse_steps_zero_never_stops_on_skips():
    NumericsGuard(collapse_steps=0, min_scale=1.0).check(chunk(skip_streak=10_000, floor_streak=10_000))


# ------------------------------------------------------------------ through the engine


@pytest.mark.parametrize("telemetry", ["true", "false"])
def test_an_exploding_learning_rate_stops_at_the_first_nonfinite_step(tmp_path, capsys, telemetry):
    outcome = execute(
        compose(
            *TINY,
            "precision=fp32",
            "xla=false",
            "tracking.enabled=false",
            "checkpoint.enabled=false",
            "optimizer.name=sgd",
            "optimizer.momentum=0.0",
            "optimizer.learning_rate=1e12",
            f"train.telemetry={telemetry}",
        ),
        tmp_path / "run",
        tmp_path,
    )
    assert outcome.error.startswith("NumericsStop: nonfinite_loss at global step ")
    step = int(outcome.error.rsplit(" ", 1)[1])
    assert step < 10  # stopped at the step, not at the epoch's end (45 steps)
    err = capsys.readouterr().err
    assert f"at global step {step}" in err and "Traceback" not in err


def test_skip_under_float32_adds_a_scale_one_optimizer_that_skips(tmp_path, monkeypatch):
    broken_models.use(monkeypatch, "poisoned")
    outcome = execute(
        compose(
            *TINY,
            "precision=fp32",
            "xla=false",
            "tracking.enabled=false",
            "checkpoint.enabled=false",
            "train.on_nonfinite=skip",
            "train.collapse_steps=8",
        ),
        tmp_path / "run",
        tmp_path,
    )
    plan = outcome.plan
    assert plan.loss_scale.optimizer == "replica_safe" and plan.loss_scale.value == 1.0
    # Poisoned after 5 updates: steps 6.. are skipped; 8 in a row stop at the end of the chunk reaching 13.
    assert outcome.error.startswith("NumericsStop: skipped_steps at global step ")
    assert 13 <= int(outcome.error.rsplit(" ", 1)[1]) <= 16


@pytest.mark.slow  # two replicas: a multi-device run, seconds of CPU in this process
def test_an_injected_nonfinite_gradient_stream_stops_float16_mirrored_xla_with_the_scale_curve(
    tmp_path, monkeypatch, capsys
):
    broken_models.use(monkeypatch, "poisoned")
    db = f"sqlite:///{tmp_path}/m.db"
    outcome = execute(
        compose(
            *TINY,
            "precision=mixed",
            "strategy=mirrored",
            "xla=true",
            f"tracking.uri={db}",
            "checkpoint.enabled=false",
            "train.collapse_steps=20",
        ),
        tmp_path / "run",
        tmp_path,
    )
    assert outcome.plan.step.kind == "replica_xla" and outcome.plan.loss_scale.optimizer == "replica_safe"
    # Updates 1-5 apply, step 6 on skip; the chunk reaching 20 consecutive skips (step 25) stops it.
    stop_step = int(outcome.error.rsplit(" ", 1)[1])
    assert outcome.error.startswith("NumericsStop: skipped_steps") and 25 <= stop_step <= 28
    err = capsys.readouterr().err
    assert f"global steps 6-{stop_step}" in err and "the loss scale is 1 (its minimum)" in err
    assert "precision.float32_layers" in err and "mode=doctor" in err

    client = MlflowClient(db)
    run = client.get_run(outcome.run_id)
    assert run.info.status == "FAILED" and run.data.tags["numerics.stop"] == "skipped_steps"
    curve = {m.step: m.value for m in client.get_metric_history(outcome.run_id, "step/loss_scale")}
    assert sorted(curve) == list(range(1, stop_step + 1))  # every step up to the failing one
    assert curve[5] == 32768.0 and curve[6] == 16384.0 and curve[stop_step] == 1.0
    skipped = {m.step: m.value for m in client.get_metric_history(outcome.run_id, "step/skipped")}
    assert skipped[5] == 0.0 and all(skipped[s] == 1.0 for s in range(6, stop_step + 1))


@pytest.mark.slow  # several trainings, seconds of CPU in this process
def test_healthy_runs_log_gradient_norm_and_skipped_steps(tmp_path):
    db = f"sqlite:///{tmp_path}/m.db"
    outcome = execute(
        compose(
            *TINY,
            "precision=mixed",
            "xla=false",
            f"tracking.uri={db}",
            "checkpoint.enabled=false",
            "tracking.step_metrics_every=8",
            "tracking.system_metrics=false",
        ),
        tmp_path / "run",
        tmp_path,
    )
    assert outcome.error is None
    final = outcome.result.final
    assert final["grad_norm"] > 0 and final["skipped_steps"] >= 0
    client = MlflowClient(db)
    norms = client.get_metric_history(outcome.run_id, "step/grad_norm")
    assert [m.step for m in norms][:3] == [8, 16, 24] and all(math.isfinite(m.value) and m.value > 0 for m in norms)
    assert client.get_metric_history(outcome.run_id, "step/skipped_steps")


# ------------------------------------------------------------------ float32 layers


@pytest.mark.slow  # two trainings, seconds of CPU in this process
def test_a_float16_overflow_stops_and_float32_layers_fix_it(tmp_path, monkeypatch):
    broken_models.use(monkeypatch, "overflow")
    quiet = [
        *TINY,
        "precision=mixed",
        "xla=false",
        "tracking.enabled=false",
        "checkpoint.enabled=false",
        "train.epochs=1",
    ]
    broken = execute(compose(*quiet), tmp_path / "a", tmp_path)
    assert broken.error == "NumericsStop: nonfinite_loss at global step 1"
    fixed = execute(compose(*quiet, "precision.float32_layers=[amplify,attenuate]"), tmp_path / "b", tmp_path)
    assert fixed.error is None and math.isfinite(fixed.result.final["loss"])
    assert fixed.plan.precision.float32_layers == ["amplify", "attenuate"]
    layers = {layer.name: layer for layer in fixed.model.layers}
    assert layers["amplify"].compute_dtype == "float32" and layers["dense_0"].compute_dtype == "float16"


def test_an_unknown_float32_layer_is_refused_with_the_model_s_layer_names(tmp_path):
    from launcher.config.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        execute(
            compose(
                *TINY,
                "precision=mixed",
                "tracking.enabled=false",
                "checkpoint.enabled=false",
                "precision.float32_layers=[dense_9]",
            ),
            tmp_path / "run",
            tmp_path,
        )
    text = str(refused.value)
    assert "precision.float32_layers" in text and "dense_9" in text and "dense_0" in text
