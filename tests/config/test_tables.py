"""The component tables: each entry complete (its YAML, schema and builder or loader), each name set the schema
and the build read made from its table, and a new precision considered by everything that chooses one.

The tables: `launcher.config.models`, `launcher.config.datasets`, `launcher.config.precisions`,
`launcher.config.exports` (strategies: tests/plan/test_strategies.py; tasks: tests/train/test_tasks.py; optimizers:
tests/train/test_optimizers.py).
"""

from __future__ import annotations

import ast
import importlib.util
import math
from dataclasses import fields, replace

import pytest
from fakes import CPU_AMX, CPU_AVX512_BF16, CPU_PLAIN, EPYC_AVX512_BF16, OLD_GPU, ONE_A100, ONE_V100
from support.config import CONF_DIR, config

from launcher.config import datasets, exports, models, precisions
from launcher.config.schema import DATASET_SCHEMAS, MODEL_SCHEMAS
from launcher.plan.environment import Environment, Gpu
from launcher.plan.resolve import resolve, resolve_all

HARDWARE = [CPU_PLAIN, CPU_AVX512_BF16, CPU_AMX, EPYC_AVX512_BF16, OLD_GPU, ONE_V100, ONE_A100]


def yaml_names(group: str) -> set[str]:
    return {p.stem for p in (CONF_DIR / group).glob("*.yaml")}


def module_functions(module: str) -> set[str]:
    """The functions a module defines at its top level, read from its source (nothing imported: no TensorFlow)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, f"no module {module}"
    with open(spec.origin) as source:
        tree = ast.parse(source.read())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def schema_name(schema: type) -> str:
    return next(f.default for f in fields(schema) if f.name == "name")


def test_every_model_kind_has_its_schema_yaml_and_builder_and_the_name_sets_are_made_from_the_table():
    from launcher.train.registry import MODELS

    for name, kind in models.MODEL_KINDS.items():
        assert kind.name == name and schema_name(kind.schema) == name
        assert issubclass(kind.schema, models.ModelBase)
        assert {"check", "build"} <= module_functions(kind.builder), kind.builder
    assert yaml_names("model") == {*models.MODEL_KINDS, "custom"}
    made = {**{n: k.schema for n, k in models.MODEL_KINDS.items()}, "custom": models.CustomModelConfig}
    assert made == MODEL_SCHEMAS
    assert MODELS.modules == {n: k.builder for n, k in models.MODEL_KINDS.items()}


def test_every_dataset_has_its_schema_yaml_and_loader_and_the_name_sets_are_made_from_the_table():
    from launcher.train.registry import DATASETS

    for name, kind in datasets.DATASET_KINDS.items():
        assert kind.name == name and schema_name(kind.schema) == name
        assert issubclass(kind.schema, datasets.DatasetBase)
        assert "load" in module_functions(kind.loader), kind.loader
    assert yaml_names("dataset") == {*datasets.DATASET_KINDS, "custom"}
    made = {**{n: k.schema for n, k in datasets.DATASET_KINDS.items()}, "custom": datasets.CustomDatasetConfig}
    assert made == DATASET_SCHEMAS
    assert DATASETS.modules == {n: k.loader for n, k in datasets.DATASET_KINDS.items()}


def test_the_precision_table_has_one_float32_baseline_fast_everywhere_and_an_order_for_auto():
    table = precisions.PRECISIONS
    assert all(p.name == name for name, p in table.items())
    assert [p.name for p in table.values() if p.baseline] == [precisions.baseline().name] == ["fp32"]
    assert len({p.preference for p in table.values()}) == len(table)  # auto never has to choose by table order
    assert [p.name for p in precisions.by_preference()] == ["bf16", "mixed", "fp32"]
    assert [p.name for p in precisions.overflow_safe()] == ["bf16"]
    for env in HARDWARE:
        assert precisions.baseline().fast_on(env) and precisions.baseline().native_on(env)
        choice = precisions.auto_choice(env)
        assert choice.fast_on(env) and choice.native_on(env) and choice.auto_reason(env)
        assert resolve(config("precision=auto"), env).precision.name == choice.name


FP8 = precisions.Precision(
    "fp8",
    "mixed_float8",
    "float8",
    True,
    lambda env: env.gpu_min_capability is not None and env.gpu_min_capability >= (9, 0),
    float32_range=False,
    preference=3,
    auto_reason=lambda env: "GPU compute capability >= 9.0 has float8 tensor cores",
    cpu_instructions=None,
)
ONE_H100 = Environment(cpu_count=8, gpus=(Gpu("H100", (9, 0)),))


def test_a_new_precision_is_chosen_by_auto_timed_by_tune_and_advised_by_the_doctor_and_the_guard(monkeypatch):
    """Nothing that chooses a precision names one: a new entry with a higher preference is what auto takes where
    it is fast, tune=auto times it where the hardware has its instructions, and the doctor and the numerics guard
    advise the float32-range precision when it needs loss scaling."""
    from launcher.doctor.diagnose import Facts, candidate_fixes
    from launcher.launch import tuning
    from launcher.plan.rules.precision import auto_precision
    from launcher.train.numerics import ChunkTelemetry, NumericsGuard, NumericsStop

    monkeypatch.setitem(precisions.PRECISIONS, "fp8", FP8)
    assert auto_precision(ONE_H100) == ("fp8", "GPU compute capability >= 9.0 has float8 tensor cores")
    assert auto_precision(ONE_A100)[0] == "bf16"  # where it is not fast, the next preferred
    assert tuning._native_precisions(ONE_H100, []) == ["fp32", "fp8", "bf16", "mixed"]
    left_out: list[str] = []
    assert tuning._native_precisions(CPU_PLAIN, left_out) == ["fp32"]
    assert left_out == ["bf16: this CPU has no bfloat16 instructions (emulated: always slower)"]
    facts = Facts(
        "fp8", learning_rate=1.0, plan_lr=1.0, lr_rule="none", replicas=1, batch_rule="global", xla=False, clipnorm=0.0
    )
    fixes = [fix.overrides for fix in candidate_fixes("precision", facts, [], [])]
    assert fixes == [{"precision.name": "bf16"}, {"precision.name": "fp32"}]
    with pytest.raises(NumericsStop, match="precision=bf16: bfloat16 has float32's range"):
        NumericsGuard(precision="fp8").check(ChunkTelemetry(1, 1, 0, 0, 0, math.nan, nonfinite_loss_step=1))
    # A second precision with float32's range and no loss scaling is advised too, preferred first.
    wide = replace(FP8, name="bf16_pure", policy="bfloat16", compute_dtype="bfloat16", needs_loss_scaling=False)
    monkeypatch.setitem(precisions.PRECISIONS, "bf16_pure", replace(wide, float32_range=True, preference=4))
    facts = replace(facts, precision="mixed")
    fixes = [fix.overrides["precision.name"] for fix in candidate_fixes("precision", facts, [], [])]
    assert fixes == ["bf16_pure", "bf16", "fp32"]


def test_every_export_format_is_one_the_plan_accepts_and_describes():
    from launcher.plan.rules.export import decide_export
    from launcher.plan.rules.findings import Findings

    table = exports.EXPORT_FORMATS
    assert all(f.name == name for name, f in table.items())
    assert [f.name for f in table.values() if f.always] == ["keras"]
    assert len({f.written for f in table.values()}) == len(table)  # no two formats write the same file
    every = f"export.formats=[{','.join(table)}]"
    plan, problems = resolve_all(config(every), CPU_PLAIN)
    assert problems == [] and plan.export.formats == list(table)
    reason = plan.export.reason("formats")
    assert all(f"{f.name}: {f.description}" in reason for f in table.values())
    found = Findings()
    decide_export(config("export.formats=[saved_model,onnx]"), found)
    (refused,) = found.violations
    assert refused.expected.startswith(f"a list of {list(table)}, your export writer") and "(unknown: ['onnx'])" in (
        refused.expected
    )
    assert exports.served_formats(["keras", "tflite", "onnx", "saved_model"]) == ["tflite", "saved_model"]
