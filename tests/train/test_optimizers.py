"""Optimizers and learning-rate schedules by name (Keras's set) or import path: the resolver's refusals, the
arguments the launcher fills, every optimizer under both loss-scale optimizers, and a whole run."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from fakes import CPU_PLAIN, EPYC_RATES
from support.config import TINY, compose, config
from support.train import Harness

from launcher.config.optimizers import OPTIMIZERS, SCHEDULES
from launcher.launch.training import execute
from launcher.plan.environment import Environment
from launcher.plan.resolve import resolve, resolve_all
from launcher.plan.schedule import schedule
from launcher.train.loss_scale import ReplicaSafeLossScaleOptimizer
from launcher.train.optimizers import make_optimizer, optimizer_problems
from launcher.train.schedules import WarmupSchedule, learning_rate

MEASURED_EPYC = Environment(cpu_count=2, cpu_flags=frozenset({"avx512_bf16"}), matmul_gflops=EPYC_RATES)


def test_every_optimizer_and_schedule_entry_is_a_keras_class_and_a_fused_kernel_has_its_fused_twin():
    """An entry of `launcher.config.optimizers` names a class Keras has; one that says it has a fused kernel has
    its fused twin in `launcher.train.fused_update.FUSED` (else optimizer.update=auto would pick a missing one)."""
    from launcher.train.fused_update import FUSED

    for name, kind in OPTIMIZERS.items():
        cls = getattr(keras.optimizers, kind.keras_class)
        assert issubclass(cls, keras.optimizers.Optimizer), name
        assert (cls in FUSED) == (kind.fused_kernel is not None), name
    for name, kind in SCHEDULES.items():
        assert kind.keras_class is None or hasattr(keras.optimizers.schedules, kind.keras_class), name


def refusals(*overrides):
    _, violations = resolve_all(config(*overrides), CPU_PLAIN)
    return {v.key: v for v in violations}


# ---------------------------------------------------------------------------------------- the resolver


def test_an_unknown_optimizer_or_schedule_is_refused_with_the_choices_and_the_nearest_name():
    found = refusals("optimizer.name=lino", "optimizer.schedule=cosin")
    assert "'lion'" in found["optimizer.name"].expected and found["optimizer.name"].fix == "optimizer.name=lion"
    assert "cosine_restarts" in found["optimizer.schedule"].expected
    assert found["optimizer.schedule"].fix == "optimizer.schedule=cosine"


def test_arguments_the_launcher_owns_are_refused_in_params_naming_the_key_that_sets_them():
    found = refusals("+optimizer.params.learning_rate=0.1", "+optimizer.params.gradient_accumulation_steps=4")
    assert "optimizer.learning_rate" in found["optimizer.params.learning_rate"].fix
    assert "optimizer.gradient_accumulation_steps" in found["optimizer.params.gradient_accumulation_steps"].fix
    sgd = refusals("optimizer.name=sgd", "+optimizer.params.momentum=0.5")  # sgd's momentum has its own key
    assert sgd["optimizer.params.momentum"].fix == "drop optimizer.params.momentum; set optimizer.momentum"
    assert not refusals("optimizer.name=rmsprop", "+optimizer.params.momentum=0.5")  # rmsprop's is a param


def test_a_schedule_missing_what_it_needs_or_given_what_it_cannot_take_is_refused_all_at_once():
    found = refusals("optimizer.schedule=exponential", "train.max_time=2x", "+optimizer.schedule_params.staircase=true")
    assert set(found) == {"optimizer.schedule_params.decay_rate", "train.max_time"}
    assert found["optimizer.schedule_params.decay_rate"].fix == "+optimizer.schedule_params.decay_rate=0.5"
    constant = refusals("+optimizer.schedule_params.alpha=0.1")
    assert "optimizer.schedule=constant" in constant["optimizer.schedule_params"].expected
    piecewise = refusals(
        "optimizer.schedule=piecewise",
        "+optimizer.schedule_params.boundaries=[10,20]",
        "+optimizer.schedule_params.values=[0.1,0.01]",
    )
    assert piecewise["optimizer.schedule_params.values"].fix == "optimizer.schedule_params.values=[0.001,0.001,0.001]"


def test_piecewise_values_are_rates_so_an_lr_rule_is_said_not_to_scale_them():
    plan = resolve(
        config(
            "optimizer.schedule=piecewise",
            "+optimizer.schedule_params.boundaries=[10]",
            "+optimizer.schedule_params.values=[0.01,0.001]",
            "scaling=linear",
        ),
        CPU_PLAIN,
    )
    assert any("scaling.lr_rule=linear does not scale them" in w for w in plan.warnings)


@pytest.mark.parametrize(
    ("name", "update"), [("adam", "fused"), ("adamw", "fused"), ("sgd", "fused"), ("lion", "keras"), ("nadam", "keras")]
)
def test_the_fused_update_runs_where_the_launcher_has_a_kernel_and_the_plan_says_which(name, update):
    plan = resolve(config(f"optimizer.name={name}", "xla=false"), CPU_PLAIN)
    assert plan.step.update == update
    assert plan.optimizer.optimizer == f"keras.optimizers.{OPTIMIZERS[name].keras_class}"
    if update == "keras":
        assert "no fused update" in plan.step.reason("update")


def test_adafactor_keeps_xla_off_under_auto_and_warns_under_true():
    auto = resolve(config("optimizer.name=adafactor", "xla=auto", "precision=fp32"), MEASURED_EPYC)
    assert auto.step.xla is False and "0/0 = NaN" in auto.step.reason("xla")
    assert resolve(config("optimizer.name=adam", "xla=auto", "precision=fp32"), MEASURED_EPYC).step.xla is True
    forced = resolve(config("optimizer.name=adafactor", "xla=true"), CPU_PLAIN)
    assert forced.step.xla is True and any("Use xla=false" in w for w in forced.warnings)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["optimizer.schedule=cosine"], {"initial_learning_rate": 0.001, "decay_steps": 95}),
        (["optimizer.schedule=cosine_restarts"], {"initial_learning_rate": 0.001, "first_decay_steps": 20}),
        (
            ["optimizer.schedule=exponential", "+optimizer.schedule_params.decay_rate=0.5"],
            {"initial_learning_rate": 0.001, "decay_steps": 95, "decay_rate": 0.5},
        ),
        (
            ["optimizer.schedule=polynomial", "+optimizer.schedule_params.decay_steps=10"],
            {"initial_learning_rate": 0.001, "decay_steps": 10},
        ),
        (["optimizer.schedule=constant"], None),
    ],
    ids=["cosine", "restarts", "exponential", "given-wins", "constant"],
)
def test_the_launcher_fills_the_planned_rate_and_the_steps_after_warmup_unless_given(overrides, expected):
    cfg = config(*overrides, "scaling.batch_size=32", "train.epochs=5", "scaling.warmup_steps=5")
    plan = schedule(cfg, resolve(cfg, CPU_PLAIN), 640, 100)  # 20 steps per epoch, 100 in all, 95 after warmup
    assert plan.schedule.lr_schedule_arguments == expected


# ------------------------------------------------------------------------------------------- the schedules


def test_warmup_rises_to_where_the_schedule_starts_then_the_schedule_runs_from_zero():
    after = keras.optimizers.schedules.CosineDecay(0.01, decay_steps=90)
    rates = WarmupSchedule(0.01, 10, after)
    assert float(rates(0)) == pytest.approx(0.001) and float(rates(9)) == pytest.approx(0.01)
    for step in (10, 40, 99):
        assert float(rates(step)) == pytest.approx(
            0.01 * 0.5 * (1 + math.cos(math.pi * (step - 10) / 90)), rel=1e-5, abs=1e-8
        )
    piecewise = WarmupSchedule(0.5, 4, keras.optimizers.schedules.PiecewiseConstantDecay([3], [0.02, 0.01]))
    assert float(piecewise(3)) == pytest.approx(0.02) and float(piecewise(4 + 5)) == pytest.approx(0.01)
    restored = WarmupSchedule.from_config(rates.get_config())
    assert float(restored(40)) == pytest.approx(float(rates(40)))


@pytest.mark.parametrize("name", sorted(set(SCHEDULES) - {"constant"}))
def test_every_schedule_by_name_is_made_from_the_plan_and_starts_at_the_planned_rate(name):
    extra = {
        "exponential": ["+optimizer.schedule_params.decay_rate=0.5"],
        "inverse_time": ["+optimizer.schedule_params.decay_rate=0.5"],
        "piecewise": ["+optimizer.schedule_params.boundaries=[50]", "+optimizer.schedule_params.values=[0.001,1e-4]"],
    }.get(name, [])
    cfg = config(f"optimizer.schedule={name}", *extra, "scaling.batch_size=32", "train.epochs=5")
    plan = schedule(cfg, resolve(cfg, CPU_PLAIN), 640, 100)
    assert optimizer_problems(cfg, plan) == []
    rates = learning_rate(plan)
    assert float(rates(0)) == pytest.approx(0.001)
    assert float(rates(99)) < 0.001  # every one of these decays


def test_arguments_that_fit_no_parameter_are_refused_naming_the_parameters_there_are():
    cfg = config(
        "optimizer.name=lion",
        "+optimizer.params.beta_3=0.9",
        "optimizer.schedule=polynomial",
        "+optimizer.schedule_params.powr=2",
    )
    problems = {p.key: p for p in optimizer_problems(cfg, schedule(cfg, resolve(cfg, CPU_PLAIN), 640, 100))}
    assert set(problems) == {"optimizer.params.beta_3", "optimizer.schedule_params.powr"}
    assert "beta_2" in problems["optimizer.params.beta_3"].expected
    assert "'power'" in problems["optimizer.schedule_params.powr"].expected


def test_yours_by_import_path_are_imported_checked_and_used():
    cfg = config(
        "optimizer.name=user_parts:HalfStepSGD",
        "optimizer.schedule=user_parts:halving",
        "+optimizer.schedule_params.every=10",
        "scaling.batch_size=32",
    )
    plan = schedule(cfg, resolve(cfg, CPU_PLAIN), 640, 100)
    assert optimizer_problems(cfg, plan) == []
    optimizer = make_optimizer(cfg.optimizer, learning_rate(plan))
    assert type(optimizer).__name__ == "HalfStepSGD"
    assert float(optimizer.learning_rate) == pytest.approx(0.001)
    optimizer.iterations.assign(25)
    assert float(optimizer.learning_rate) == pytest.approx(0.001 / 4)
    wrong = config("optimizer.name=user_parts:linear", "optimizer.schedule=user_parts:nowhere")
    keys = {p.key for p in optimizer_problems(wrong, schedule(wrong, resolve(wrong, CPU_PLAIN), 640, 100))}
    assert keys == {"optimizer.name", "optimizer.schedule"}


# ------------------------------------------------------------------- every optimizer, both loss-scale optimizers


def _wrapped(name: str, implementation: str):
    cfg = config(f"optimizer.name={name}").optimizer

    def make():
        inner = make_optimizer(cfg, 0.01)
        if implementation == "replica_safe":
            return ReplicaSafeLossScaleOptimizer(inner, initial_scale=256.0)
        return keras.optimizers.LossScaleOptimizer(inner, initial_scale=256.0)

    return make


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize(
    ("implementation", "strategy", "xla"),
    [("replica_safe", "mirrored", True), ("stock", "default", False)],
    ids=["replica_safe-mirrored-xla", "stock-default"],
)
def test_every_optimizer_steps_and_skips_a_non_finite_step_under_both_loss_scale_optimizers(
    name, implementation, strategy, xla
):
    xla = xla and OPTIMIZERS[name].not_under_xla is None  # adafactor: the resolver keeps XLA off
    h = Harness(strategy, xla, _wrapped(name, implementation))
    replicas = h.strategy.num_replicas_in_sync
    before = h.weights()
    h.step([1.0] * replicas)
    moved = h.weights()
    assert all(np.isfinite(w).all() for w in moved)
    assert any(not np.array_equal(a, b) for a, b in zip(before, moved, strict=True)), f"{name} did not update"
    h.step([float("nan")] * replicas)
    for a, b in zip(moved, h.weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert h.scale == 128.0  # halved by the skipped step


# ------------------------------------------------------------------------------------------------ a whole run


@pytest.mark.slow  # two replicas: a multi-device run
def test_lion_with_cosine_restarts_after_warmup_trains_under_float16_mirrored_xla(tmp_path):
    overrides = [
        *TINY,
        "tracking.enabled=false",
        "checkpoint.enabled=false",
        "precision=mixed",
        "strategy=mirrored",
        "xla=true",
        "optimizer.name=lion",
        "optimizer.learning_rate=3e-4",
        "optimizer.schedule=cosine_restarts",
        "scaling.warmup_steps=5",
    ]
    outcome = execute(compose(*overrides), tmp_path / "run", tmp_path)
    assert outcome.error is None
    assert outcome.plan.loss_scale.optimizer == "replica_safe" and outcome.plan.step.kind == "replica_xla"
    losses = [e.logs["loss"] for e in outcome.result.epochs]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    plan, rates = outcome.plan, learning_rate(outcome.plan)
    steps = plan.schedule.steps_per_epoch
    for done, epoch in enumerate(outcome.result.epochs, start=1):  # logged: the rate the epoch's last step took
        assert epoch.logs["learning_rate"] == pytest.approx(float(rates(done * steps - 1)), rel=1e-5)
    assert isinstance(outcome.model, keras.Model) and tf.is_tensor(outcome.model.weights[0].value)


def test_the_new_keys_wrong_at_once_are_refused_together_before_anything_runs(cli_here, tmp_path):
    done = cli_here(
        "optimizer.name=lino",
        "optimizer.schedule=polynomial",
        "+optimizer.schedule_params.powr=2",
        "model.init_from=nowhere",
        "train.max_time=2x",
    )
    assert done.returncode == 2
    # The rules' refusals together, before TensorFlow loads; the checks that need the data or Keras once they pass.
    assert "Invalid configuration (2 problems)" in done.stderr
    for said in ("optimizer.name='lino'", "train.max_time='2x'"):
        assert said in done.stderr, said
    done = cli_here(
        "optimizer.name=lion",
        "optimizer.schedule=polynomial",
        "+optimizer.schedule_params.powr=2",
        "model.init_from=nowhere",
        "train.max_time=2h",
    )
    assert done.returncode == 2
    assert "Invalid configuration (2 problems)" in done.stderr
    for said in (
        "optimizer.schedule_params.powr=2: expected an argument of PolynomialDecay",
        "model.init_from='nowhere'",
    ):
        assert said in done.stderr, said
    assert "Traceback" not in done.stderr
