"""Every resolver rule, against fake environments (no TensorFlow runtime needed).

The rules: `launcher.plan.rules.precision`, `launcher.plan.rules.step`, `launcher.plan.rules.loss_scale`,
`launcher.plan.rules.optimizer`, `launcher.plan.rules.numerics`, `launcher.plan.rules.task`,
`launcher.plan.rules.export`, `launcher.plan.rules.fine_tune`, `launcher.plan.rules.profile` (and the strategy rule,
`tests/plan/test_strategies.py`).
"""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from fakes import (
    CPU_AMX,
    CPU_AMX_MEASURED,
    CPU_AVX512_BF16,
    CPU_PLAIN,
    EIGHT_A100,
    EIGHT_V100,
    EPYC_AVX512_BF16,
    OLD_GPU,
    ONE_A100,
    ONE_V100,
    TWO_A100,
    TWO_WORKERS,
    XEON_AVX512_BF16,
)
from support.config import compose, config

from launcher.config.bounds import declared
from launcher.config.errors import ConfigError
from launcher.plan.resolve import resolve, wants_measurements
from launcher.plan.schedule import schedule


def plan_for(env, *overrides):
    return resolve(config(*overrides), env)


# ------------------------------------------------------------- precision


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (CPU_AMX, "bf16"),
        (CPU_AVX512_BF16, "fp32"),
        (CPU_PLAIN, "fp32"),
        (ONE_V100, "mixed"),
        (EIGHT_V100, "mixed"),
        (ONE_A100, "bf16"),
        (EIGHT_A100, "bf16"),
        (OLD_GPU, "fp32"),
    ],
)
def test_auto_precision_follows_the_hardware(env, expected):
    plan = plan_for(env, "precision=auto")
    assert plan.precision.name == expected
    assert plan.precision.reason("name").startswith("precision=auto:")


def test_explicit_precision_is_kept_with_policy():
    plan = plan_for(CPU_PLAIN, "precision=bf16")
    assert plan.precision.name == "bf16"
    assert plan.precision.policy == "mixed_bfloat16"
    assert plan.precision.output_dtype == "float32"


def test_mixed_without_fp16_fast_path_warns_and_suggests_bf16():
    plan = plan_for(CPU_AMX, "precision=mixed")
    warning = " ".join(plan.warnings)
    assert "without a float16 fast path" in warning
    assert "precision=bf16" in warning


@pytest.mark.parametrize("env", [CPU_PLAIN, CPU_AVX512_BF16], ids=["plain", "avx512-bf16-no-amx"])
def test_mixed_on_cpu_without_amx_warns_without_suggesting_bf16(env):
    plan = plan_for(env, "precision=mixed")
    assert any("without a float16 fast path" in w for w in plan.warnings)
    assert not any("precision=bf16" in w for w in plan.warnings)


def test_mixed_on_v100_has_no_speed_warning():
    plan = plan_for(ONE_V100, "precision=mixed")
    assert not any("fast path" in w for w in plan.warnings)


# ------------------------------------------------------------- loss scale


def test_mixed_gets_dynamic_loss_scaling_by_default():
    plan = plan_for(ONE_V100, "precision=mixed")
    assert plan.loss_scale.mode == "dynamic"
    assert plan.loss_scale.optimizer == "stock"


def test_mixed_without_loss_scaling_is_refused():
    with pytest.raises(ConfigError, match=r"loss_scale='none'.*\n.*fix: loss_scale=dynamic"):
        plan_for(ONE_V100, "precision=mixed", "loss_scale=none")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("mode", ["dynamic", "fixed"])
def test_explicit_loss_scale_unused_is_a_warning(precision, mode):
    plan = plan_for(CPU_AMX, f"precision={precision}", f"loss_scale={mode}")
    assert plan.loss_scale.mode == "none"
    assert any(f"loss_scale={mode} is unused with precision={precision}" in w for w in plan.warnings)


def test_fixed_scale_must_be_positive():
    with pytest.raises(ConfigError, match=r"loss_scale.value=0.0: expected a finite number > 0"):
        plan_for(ONE_V100, "precision=mixed", "loss_scale=fixed", "loss_scale.value=0")


def test_fixed_scale_not_power_of_two_warns():
    plan = plan_for(ONE_V100, "precision=mixed", "loss_scale=fixed", "loss_scale.value=1000")
    assert plan.loss_scale.mode == "fixed"
    assert plan.loss_scale.optimizer == "replica_safe"
    assert any("not a power of 2" in w for w in plan.warnings)


def test_dynamic_params_must_be_ordered_and_all_reported():
    with pytest.raises(ConfigError) as err:
        plan_for(
            ONE_V100,
            "precision=mixed",
            "loss_scale=dynamic",
            "loss_scale.initial_scale=8",
            "loss_scale.min_scale=16",
            "loss_scale.growth_interval=0",
        )
    keys = [v.key for v in err.value.violations]
    assert keys == ["loss_scale.initial_scale", "loss_scale.growth_interval"]
    assert "min_scale (16) <= initial_scale <= max_scale" in str(err.value)


def test_multi_replica_xla_mixed_swaps_in_replica_safe_lso():
    plan = plan_for(CPU_AMX, "precision=mixed", "strategy=mirrored", "xla=true")
    assert plan.strategy.replicas == 2
    assert plan.step.kind == "replica_xla"
    assert plan.loss_scale.optimizer == "replica_safe"
    assert "crashes under XLA" in plan.loss_scale.reason("optimizer")


def test_multi_replica_without_xla_still_uses_replica_safe():
    plan = plan_for(EIGHT_V100, "precision=mixed", "strategy=mirrored", "xla=false")
    assert plan.loss_scale.optimizer == "replica_safe"
    assert "first replica" in plan.loss_scale.reason("optimizer")


def test_stock_lso_with_multi_replica_xla_is_refused():
    with pytest.raises(
        ConfigError, match=r"loss_scale.implementation='stock'.*\n.*fix: loss_scale.implementation=auto"
    ):
        plan_for(TWO_A100, "precision=mixed", "strategy=mirrored", "xla=true", "loss_scale.implementation=stock")


def test_stock_lso_with_fixed_mode_is_refused():
    with pytest.raises(ConfigError, match="has no fixed mode"):
        plan_for(ONE_V100, "precision=mixed", "loss_scale=fixed", "loss_scale.implementation=stock")


def test_stock_lso_multi_replica_without_xla_warns():
    plan = plan_for(TWO_A100, "precision=mixed", "strategy=mirrored", "xla=false", "loss_scale.implementation=stock")
    assert plan.loss_scale.optimizer == "stock"
    assert any("first replica" in w for w in plan.warnings)


# ------------------------------------------------------------------ XLA


def test_xla_true_single_replica_compiles_the_whole_step():
    plan = plan_for(CPU_PLAIN, "xla=true")
    assert plan.step.xla is True and plan.step.kind == "fused_xla"


def test_xla_false_is_no_xla_anywhere_hybrid_or_graph():
    plan = plan_for(EIGHT_A100, "xla=false", "strategy=mirrored")
    assert plan.step.kind == "hybrid" and plan.step.update == "fused"
    assert "no XLA anywhere" in plan.step.reason("kind")
    assert plan_for(EIGHT_A100, "xla=false", "optimizer.update=keras").step.kind == "graph"


@pytest.mark.parametrize(
    ("overrides", "step", "update"),
    [
        (("xla=false",), "hybrid", "fused"),
        (("xla=false", "optimizer.update=keras"), "graph", "keras"),
        (("xla=true",), "fused_xla", "keras"),
        (("xla=true", "optimizer.update=fused"), "fused_xla", "fused"),
        (("xla=true", "strategy=mirrored"), "replica_xla", "fused"),
        (("xla=true", "strategy=mirrored", "optimizer.update=keras"), "replica_xla", "keras"),
        (("xla=false", "optimizer.name=sgd"), "hybrid", "fused"),
        (("xla=false", "optimizer.name=adamw"), "hybrid", "fused"),
    ],
)
def test_step_kind_and_optimizer_update(overrides, step, update):
    plan = plan_for(CPU_PLAIN, *overrides)
    assert (plan.step.kind, plan.step.update) == (step, update)
    if update == "fused" and "optimizer.update=fused" not in overrides:
        assert "ResourceApply" in plan.step.reason("update")


def test_optimizer_update_typo_is_refused_with_choices():
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException) as err:
        config("optimizer.update=fast")
    assert "Invalid value 'fast', expected one of [auto, keras, fused]" in str(err.value.__cause__)


# Measured rates decide auto: the same flags (AVX-512 BF16, no AMX) on two CPUs, opposite answers.
@pytest.mark.parametrize(
    ("env", "precision", "xla", "step"),
    [
        (CPU_AMX_MEASURED, "bf16", False, "hybrid"),  # AMX: oneDNN bf16 5x XLA's
        (EPYC_AVX512_BF16, "bf16", False, "hybrid"),  # oneDNN bf16 1.9x float32, 2x XLA's bf16
        (XEON_AVX512_BF16, "fp32", True, "fused_xla"),  # bf16 0.55x float32 (0.92x via XLA)
    ],
    ids=["amx", "epyc-avx512-bf16", "xeon-avx512-bf16"],
)
def test_auto_decides_by_measured_matmul_rates(env, precision, xla, step):
    plan = plan_for(env, "precision=auto", "xla=auto")
    assert (plan.precision.name, plan.step.xla, plan.step.kind) == (precision, xla, step)
    assert "measured here" in plan.precision.reason("name") and "GFLOP/s" in plan.precision.reason("name")
    assert "measured here" in plan.step.reason("xla")


@pytest.mark.parametrize(
    ("env", "precision", "expected"),
    [
        (EPYC_AVX512_BF16, "fp32", True),
        (EPYC_AVX512_BF16, "mixed", True),
        (XEON_AVX512_BF16, "bf16", True),
        (CPU_AMX_MEASURED, "fp32", True),
        (CPU_AMX_MEASURED, "bf16", False),
    ],
)
def test_xla_auto_compares_xla_with_onednn_for_the_compute_dtype(env, precision, expected):
    assert plan_for(env, "xla=auto", f"precision={precision}").step.xla is expected


def test_only_auto_settings_ask_for_measurements():
    assert wants_measurements(config("precision=auto", "xla=false"))
    assert wants_measurements(config("precision=fp32", "xla=auto"))
    assert not wants_measurements(config("precision=fp32", "xla=false"))
    # Every worker of a job must decide the same: flags, not each machine's timings.
    assert not wants_measurements(config("precision=auto", "xla=auto", "strategy=multi_worker"))


@pytest.mark.parametrize(
    ("env", "precision", "expected"),
    [
        (CPU_AMX, "bf16", False),
        (CPU_AMX, "fp32", True),
        (CPU_AVX512_BF16, "bf16", True),
        (CPU_PLAIN, "mixed", True),
        (CPU_AMX, "mixed", False),
        (CPU_AVX512_BF16, "mixed", True),
        (ONE_A100, "bf16", True),
    ],
)
def test_xla_auto_depends_on_hardware_and_precision(env, precision, expected):
    plan = plan_for(env, "xla=auto", f"precision={precision}")
    assert plan.step.xla is expected
    assert plan.step.reason("xla").startswith("xla=auto:")


@pytest.mark.parametrize("model", ["cnn", "resnet"])
def test_xla_auto_is_off_for_convnets_on_cpu_and_on_for_gpus(model):
    assert plan_for(CPU_PLAIN, "xla=auto", f"model={model}").step.xla is False
    assert plan_for(ONE_A100, "xla=auto", f"model={model}").step.xla is True


def test_xla_accepts_hydra_bool_spelling():
    assert plan_for(CPU_PLAIN, "xla=True").step.xla is True


def test_xla_typo_is_refused_with_choices():
    with pytest.raises(ConfigError, match=r"xla='maybe': expected one of \['true', 'false', 'auto'\]"):
        plan_for(CPU_PLAIN, "xla=maybe")


# -------------------------------------------------------------- strategy


def test_mirrored_on_cpu_splits_into_logical_devices():
    plan = plan_for(CPU_AVX512_BF16, "strategy=mirrored")
    assert plan.strategy.devices == ["/cpu:0", "/cpu:1"]
    assert plan.strategy.logical_cpus == 2
    assert plan.strategy.reason("devices").startswith("adapted: no GPU")


def test_mirrored_uses_every_gpu():
    plan = plan_for(EIGHT_A100, "strategy=mirrored")
    assert plan.strategy.replicas == 8
    assert plan.strategy.logical_cpus == 0


def test_mirrored_asking_for_more_gpus_than_found_is_refused():
    with pytest.raises(ConfigError, match=r"strategy.devices=4: expected at most 2 \(found 2 GPU"):
        plan_for(TWO_A100, "strategy=mirrored", "strategy.devices=4")


def test_mirrored_on_one_gpu_warns():
    plan = plan_for(ONE_A100, "strategy=mirrored")
    assert plan.strategy.replicas == 1
    assert any("single replica" in w for w in plan.warnings)


def test_one_device_missing_gpu_is_refused_naming_devices():
    with pytest.raises(ConfigError, match=r"strategy.device='/gpu:0'.*there is no GPU 0; found no GPU"):
        plan_for(CPU_PLAIN, "strategy=one_device", "strategy.device=/gpu:0")


def test_one_device_auto_picks_gpu():
    assert plan_for(ONE_V100, "strategy=one_device").strategy.devices == ["/gpu:0"]


def test_multi_worker_needs_tf_config():
    with pytest.raises(ConfigError, match="TF_CONFIG"):
        plan_for(CPU_PLAIN, "strategy=multi_worker")


def test_multi_worker_counts_replicas_across_workers():
    plan = plan_for(TWO_WORKERS, "strategy=multi_worker")
    assert plan.strategy.replicas == 2
    assert plan.cluster.is_chief is True


def test_multi_worker_second_worker_is_not_chief():
    from dataclasses import replace

    tf_config = {**TWO_WORKERS.tf_config, "task": {"type": "worker", "index": 1}}
    plan = plan_for(replace(TWO_WORKERS, tf_config=tf_config), "strategy=multi_worker")
    assert plan.cluster.is_chief is False


# ------------------------------------------------------- batch and lr


def test_per_replica_batch_scales_global_batch():
    plan = plan_for(EIGHT_A100, "strategy=mirrored", "scaling=per_replica", "scaling.batch_size=32")
    assert plan.batch.global_batch == 256 and plan.batch.per_replica == 32
    assert plan.batch.drop_remainder is True


def test_global_batch_must_divide_by_replicas():
    with pytest.raises(
        ConfigError,
        match=r"scaling.batch_size=100: expected a multiple of the 8 replicas.*\n.*fix: scaling.batch_size=96 or 104",
    ):
        plan_for(EIGHT_A100, "strategy=mirrored", "scaling=global", "scaling.batch_size=100")


def test_global_batch_split_across_replicas():
    plan = plan_for(EIGHT_A100, "strategy=mirrored", "scaling=global", "scaling.batch_size=256")
    assert plan.batch.per_replica == 32


def test_single_replica_graph_keeps_ragged_last_batch():
    assert plan_for(CPU_PLAIN, "xla=false").batch.drop_remainder is False


def test_linear_lr_rule():
    plan = plan_for(
        EIGHT_A100, "strategy=mirrored", "scaling=linear", "scaling.batch_size=64", "optimizer.learning_rate=0.001"
    )
    assert plan.learning_rate.peak == pytest.approx(0.008)
    assert "0.001 x 512/64" in plan.learning_rate.reason("peak")


def test_sqrt_lr_rule():
    plan = plan_for(
        EIGHT_A100,
        "strategy=mirrored",
        "scaling.lr_rule=sqrt",
        "scaling.batch_size=64",
        "optimizer.learning_rate=0.001",
    )
    assert plan.learning_rate.peak == pytest.approx(0.001 * 8**0.5)


def test_warmup_epochs_become_steps_after_the_data_is_known():
    cfg = config("scaling=linear", "scaling.warmup_epochs=2", "train.epochs=3")
    plan = schedule(cfg, resolve(cfg, CPU_PLAIN), num_train=640, num_val=100)
    assert plan.schedule.steps_per_epoch == 10
    assert plan.schedule.warmup_steps == 20
    assert plan.schedule.total_steps == 30


def test_warmup_epochs_and_steps_together_are_refused():
    with pytest.raises(ConfigError, match="scaling.warmup_steps=5"):
        plan_for(CPU_PLAIN, "scaling.warmup_epochs=1", "scaling.warmup_steps=5")


def test_batch_larger_than_data_is_refused():
    cfg = config("strategy=mirrored", "scaling.batch_size=512")
    with pytest.raises(ConfigError, match="scaling.batch_size=512"):
        schedule(cfg, resolve(cfg, CPU_PLAIN), num_train=100, num_val=20)


def test_reduce_lr_on_plateau_with_schedule_is_refused():
    with pytest.raises(ConfigError, match="train.reduce_lr_on_plateau.enabled"):
        plan_for(CPU_PLAIN, "scaling=linear", "train.reduce_lr_on_plateau.enabled=true")


# ------------------------------------------------------------ reporting


def test_every_violation_is_reported_at_once():
    with pytest.raises(ConfigError) as err:
        plan_for(
            CPU_PLAIN,
            "xla=perhaps",
            "precision=mixed",
            "loss_scale=none",
            "optimizer.learning_rate=-1",
            "train.epochs=0",
        )
    keys = {v.key for v in err.value.violations}
    assert keys == {"xla", "loss_scale", "optimizer.learning_rate", "train.epochs"}
    assert str(err.value).startswith("Invalid configuration (4 problems):")
    for violation in err.value.violations:
        assert violation.fix


def test_every_decision_has_a_reason():
    plan = plan_for(CPU_AMX, "precision=mixed", "strategy=mirrored", "xla=true")
    assert all(reason for _, reason in plan.decisions().values())
    assert "plan.loss_scale.optimizer" in plan.tags()


# --------------------------------------------------------------- profile


def test_profile_window_is_a_decision_with_where_the_trace_goes():
    plan = plan_for(CPU_PLAIN, "train.profile.steps=5", "train.profile.skip_steps=3")
    assert plan.profile.window == "steps 4-8"
    assert "<run dir>/profile" in plan.profile.reason("window") and "logged to MLflow" in plan.profile.reason("window")


def test_profile_off_by_default():
    plan = plan_for(CPU_PLAIN)
    assert plan.profile.window is None and "profile" not in plan.values()


def test_negative_profile_steps_are_refused_with_a_fix():
    with pytest.raises(ConfigError) as err:
        plan_for(CPU_PLAIN, "train.profile.steps=-1", "train.profile.skip_steps=-2")
    text = str(err.value)
    assert "train.profile.steps" in text and "train.profile.skip_steps" in text and "train.profile.steps=10" in text


def test_profile_window_after_the_last_step_warns():
    cfg = config("train.profile.steps=5", "train.profile.skip_steps=50", "train.epochs=2")
    plan = schedule(cfg, resolve(cfg, CPU_PLAIN), num_train=640, num_val=100)
    assert plan.schedule.total_steps == 20
    assert any("nothing will be traced" in w and "train.profile.skip_steps=" in w for w in plan.warnings)


# ---------------------------------------------------------------- bounds

BREAKING = {
    ">= 1": "0",
    ">= 0": "-1",
    ">= 4": "3",
    "> 0": "0",
    "(0, 1)": "1",
    "[0, 1)": "1",
    "(0, 1]": "0",
    "[1, 65535]": "65536",
    "each >= 1": "[0]",
}
# The default config and the options that bring in the other schemas' keys.
OPTIONS = [
    [],
    ["model=cnn"],
    ["model=resnet"],
    ["model=transformer"],
    ["dataset=synthetic"],
    ["dataset=npz", "dataset.path=x.npz"],
    ["dataset=tfrecord", "dataset.train=x-*.tfrecord"],
    ["dataset=image_folder", "dataset.path=images"],
]


def _declared_ranges() -> list[tuple[str, list[str], dict]]:
    """(key, the option that has it, its metadata) of every range declared in the schemas."""
    found: dict[str, tuple[list[str], dict]] = {}
    for option in OPTIONS:
        for key, _, meta in declared(config(*option)):
            found.setdefault(key, (option, meta))
    return [(key, option, meta) for key, (option, meta) in sorted(found.items())]


RANGES = _declared_ranges()


def test_every_limited_field_of_every_schema_is_checked_through_some_option():
    from launcher.config.schema import DATASET_SCHEMAS, MODEL_SCHEMAS

    checked = {key for key, _, _ in RANGES}
    for group, schemas in (("model", MODEL_SCHEMAS), ("dataset", DATASET_SCHEMAS)):
        for schema in schemas.values():
            for f in dataclasses.fields(schema):
                if "bound" in f.metadata:
                    assert f"{group}.{f.name}" in checked, (schema.__name__, f.name)
    assert {"strategy.port", "model.hidden_units", "model.filters", "checkpoint.max_to_keep"} <= checked


def plan_with(env, option: list[str], override: str):
    """`plan_for(env, *option, override)` with `option` composed once: the override is read by Hydra's own parser
    and set on a copy (the ranges under test are the resolver's; 65 cases, 0.4 s of composing each saved)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    (parsed,) = OverridesParser.create().parse_overrides([override])
    node = compose(*option)
    OmegaConf.update(node, parsed.key_or_group, parsed.value(), merge=False)
    return resolve(OmegaConf.to_object(node), env)


@pytest.mark.parametrize(("key", "option", "meta"), RANGES, ids=[key for key, _, _ in RANGES])
def test_each_declared_range_refuses_a_value_outside_it_with_its_fix_as_an_override(key, option, meta):
    bad = BREAKING[meta["bound"]]
    with pytest.raises(ConfigError) as err:
        plan_with(CPU_PLAIN, option, f"{key}={bad}")
    violation = next(v for v in err.value.violations if v.key == key)
    assert violation.value == yaml.safe_load(bad)
    fix = violation.overrides[0]
    assert violation.fix == fix and fix.startswith(f"{key}=")
    plan_with(CPU_PLAIN, option, fix)  # the suggested fix is accepted


def test_a_range_case_set_on_the_composed_option_plans_like_the_composed_override():
    """`plan_with` against the full compose, on a value each way: the same Plan, the same refusal."""
    assert plan_with(CPU_PLAIN, ["model=cnn"], "model.filters=[8,4]").values() == (
        plan_for(CPU_PLAIN, "model=cnn", "model.filters=[8,4]").values()
    )
    refusals = []
    for plan in (plan_with, lambda env, option, o: plan_for(env, *option, o)):
        with pytest.raises(ConfigError) as err:
            plan(CPU_PLAIN, ["model=cnn"], "model.filters=[0]")
        refusals.append(str(err.value))
    assert refusals[0] == refusals[1]


def test_a_range_is_checked_only_when_its_condition_holds():
    plan_for(CPU_PLAIN, "checkpoint.enabled=false", "checkpoint.max_to_keep=0")
    with pytest.raises(ConfigError, match="checkpoint.max_to_keep"):
        plan_for(CPU_PLAIN, "checkpoint.max_to_keep=0")


def test_help_lists_the_declared_ranges():
    from launcher.config.help import limit_listing

    listing = limit_listing()
    assert "strategy.port: a port number in 1..65535" in listing
    assert "model.hidden_units (mlp): a non-empty list of integers, each >= 1" in listing


def test_bounds_and_rules_are_reported_together():
    with pytest.raises(ConfigError) as err:
        plan_for(
            CPU_PLAIN,
            "xla=perhaps",
            "train.max_steps_per_epoch=-1",
            "optimizer.momentum=1.5",
            "checkpoint.interval_steps=-5",
        )
    assert {v.key for v in err.value.violations} == {
        "xla",
        "train.max_steps_per_epoch",
        "optimizer.momentum",
        "checkpoint.interval_steps",
    }


def test_max_to_keep_is_only_checked_when_checkpointing():
    plan_for(CPU_PLAIN, "checkpoint=off", "checkpoint.max_to_keep=0")


# ------------------------------------------------------------- numerics


def test_skip_under_float32_adds_a_scale_one_replica_safe_optimizer_and_mixed_keeps_dynamic_scaling():
    plan = plan_for(CPU_PLAIN, "precision=fp32", "train.on_nonfinite=skip")
    assert plan.loss_scale.optimizer == "replica_safe" and plan.loss_scale.value == 1.0
    assert plan.numerics.on_nonfinite == "skip"
    mixed = plan_for(CPU_PLAIN, "precision=mixed", "train.on_nonfinite=skip")
    assert mixed.loss_scale.mode == "dynamic"
    assert mixed.loss_scale.value is None
    stop = plan_for(CPU_PLAIN, "precision=fp32")
    assert stop.loss_scale.optimizer == "none"
    assert "stop after 20 consecutive" in stop.numerics.reason("on_nonfinite")


def test_float32_layers_are_a_decision_under_a_mixed_policy_and_a_warning_under_float32():
    mixed = plan_for(CPU_PLAIN, "precision=mixed", "precision.float32_layers=[dense_0]")
    assert mixed.precision.float32_layers == ["dense_0"]
    plain = plan_for(CPU_PLAIN, "precision=fp32", "precision.float32_layers=[dense_0]")
    assert plain.precision.float32_layers is None and any("float32_layers" in w for w in plain.warnings)
