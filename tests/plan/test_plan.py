"""The Plan is typed data: attributes, not string keys; every value with its reason; nothing mutates it."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from fakes import CPU_PLAIN
from support.config import config

from launcher.config.errors import Violation
from launcher.plan.decisions import BatchPlan, ResumePlan, SchedulePlan, StepPlan
from launcher.plan.resolve import resolve
from launcher.plan.rules.batch import decide_batch, decide_learning_rate
from launcher.plan.rules.findings import Findings
from launcher.plan.schedule import schedule
from launcher.plan.section import PlanError


def test_reading_a_field_that_does_not_exist_fails_loudly():
    plan = resolve(config(), CPU_PLAIN)
    with pytest.raises(AttributeError, match="global_bach"):
        _ = plan.batch.global_bach
    with pytest.raises(AttributeError):
        _ = plan.replicas  # a key of plan.yaml, not an attribute: the section says where it lives
    with pytest.raises(TypeError):
        _ = plan["replicas"]


def test_a_plan_cannot_be_changed_only_extended_into_a_new_one():
    plan = resolve(config(), CPU_PLAIN)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.batch.global_batch = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.strategy = None
    with pytest.raises(TypeError):
        plan.batch.why["global_batch"] = "edited"
    resumed = plan.with_record(ResumePlan.of(position=("epoch 2, step 3", "checkpoint ckpt-5")))
    assert resumed.record(ResumePlan).position == "epoch 2, step 3"
    assert not plan.has(ResumePlan) and "resume" not in plan.values() and resumed.values()["resume"]


def test_records_decided_after_the_plan_print_under_their_own_heading_not_its_warnings():
    from launcher.plan.decisions import render_records

    plan = resolve(config("precision=mixed"), CPU_PLAIN)  # a Plan with warnings (float16 without a fast path)
    later = ResumePlan.of(position=("epoch 2, step 3", "checkpoint ckpt-5"))
    shown = (plan.render() + "\n" + render_records([later], "the checkpoint")).splitlines()
    assert plan.warnings and shown.index("Warnings:") < shown.index("Plan, decided by the checkpoint:")
    line = shown[shown.index("Plan, decided by the checkpoint:") + 1]
    assert line.split()[0] == "resume" and "epoch 2, step 3  checkpoint ckpt-5" in line


def test_a_record_read_before_its_owner_added_it_fails_naming_who_adds_it():
    plan = resolve(config(), CPU_PLAIN)
    with pytest.raises(PlanError, match=r"SchedulePlan is not decided yet: .*launcher.plan.schedule"):
        _ = plan.schedule.steps_per_epoch
    cfg = config("scaling.batch_size=32")
    assert schedule(cfg, resolve(cfg, CPU_PLAIN), 640, 100).schedule.steps_per_epoch == 640 // 32


def test_a_rule_cannot_run_before_the_rules_it_depends_on():
    """The batch rule takes the strategy's and the step's sections as arguments: without them it cannot run,
    and there is no default replica count to fall back to."""
    cfg, found = config("strategy=mirrored", "scaling=per_replica", "scaling.batch_size=32"), Findings()
    with pytest.raises(TypeError, match="strategy"):
        decide_batch(cfg, found)  # type: ignore[call-arg]
    with pytest.raises(AttributeError, match="replicas"):
        decide_batch(cfg, found, None, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="batch"):
        decide_learning_rate(cfg, found)  # type: ignore[call-arg]
    plan = resolve(cfg, CPU_PLAIN)
    batch = decide_batch(cfg, found, plan.strategy, plan.step)
    assert batch.global_batch == 2 * 32 and not found.violations


def test_every_value_needs_its_reason_and_a_required_value_cannot_be_left_out():
    with pytest.raises(PlanError, match=r"values without a reason \['kind'\]"):
        StepPlan(
            xla=True,
            update="keras",
            kind="fused_xla",
            steps_per_execution=1,
            why={"xla": "x", "update": "u", "steps_per_execution": "s"},
        )
    with pytest.raises(TypeError, match="drop_remainder"):
        BatchPlan.of(global_batch=(32, "a"), per_replica=(32, "b"), accumulation=(1, "c"))
    with pytest.raises(PlanError, match=r"required values left undecided \['drop_remainder'\]"):
        BatchPlan(
            global_batch=32,
            per_replica=32,
            accumulation=1,
            drop_remainder=None,
            why={"global_batch": "a", "per_replica": "b", "accumulation": "c"},
        )
    with pytest.raises(PlanError, match=r"not decided"):
        BatchPlan.of(
            global_batch=(32, "a"), per_replica=(32, "b"), accumulation=(1, "c"), drop_remainder=(False, "d")
        ).reason("micro")


def test_plan_yaml_tags_and_render_keep_the_keys_a_person_reads():
    cfg = config("precision=mixed", "strategy=mirrored", "xla=true", "scaling=per_replica", "scaling.batch_size=32")
    plan = schedule(cfg, resolve(cfg, CPU_PLAIN), 640, 100)
    written = yaml.safe_load(plan.to_yaml())
    for key in (
        "precision",
        "precision.policy",
        "strategy",
        "replicas",
        "xla",
        "step",
        "loss_scale.optimizer",
        "batch.global",
        "batch.per_replica",
        "lr",
        "train.steps_per_epoch",
        "warmup.steps",
        "task.metrics",
    ):
        assert written["decisions"][key]["reason"], key
    assert written["decisions"]["loss_scale.optimizer"]["value"] == "replica_safe"
    assert plan.tags()["plan.step"] == "replica_xla" and plan.tags()["plan.batch.global"] == "64"
    assert "  replicas" in plan.render() and written["warnings"] == list(plan.warnings)


def test_a_later_record_overrides_the_key_it_redecides():
    from launcher.plan.decisions import OutputPlan

    plan = resolve(config("precision=mixed"), CPU_PLAIN)
    assert plan.values()["model.output_dtype"] == "float32"
    wrapped = plan.with_record(OutputPlan.of(dtype=("float32 (wrapped)", "a float32 layer was added")))
    assert wrapped.values()["model.output_dtype"] == "float32 (wrapped)"
    assert list(wrapped.decisions()).count("model.output_dtype") == 1


def test_a_refused_config_still_yields_a_whole_plan_so_the_data_is_checked_too():
    from launcher.plan.resolve import resolve_all

    plan, violations = resolve_all(config("strategy=mirrored", "scaling=global", "scaling.batch_size=33"), CPU_PLAIN)
    assert [v.key for v in violations] == ["scaling.batch_size"] and isinstance(violations[0], Violation)
    assert plan.batch.global_batch == 33 and plan.learning_rate.peak > 0
    assert isinstance(schedule(config(), plan, 640, 100).schedule, SchedulePlan)


def test_a_plan_copies_and_pickles_with_its_reasons():
    """Trials and workers carry Plans around (the doctor's trial records, deep copies)."""
    import copy
    import pickle

    plan = resolve(config("precision=mixed", "strategy=mirrored"), CPU_PLAIN)
    for twin in (copy.deepcopy(plan), pickle.loads(pickle.dumps(plan))):
        assert twin == plan and twin.decisions() == plan.decisions()


def test_the_component_tables_and_the_config_folder_name_the_same_choices():
    """A table entry is a choice on the command line: its YAML exists, and no YAML names a missing entry."""
    from support.config import CONF_DIR

    from launcher.config.models import MODEL_KINDS
    from launcher.config.precisions import PRECISIONS
    from launcher.config.schema import PrecisionName

    precision_yaml = {p.stem for p in (CONF_DIR / "precision").glob("*.yaml")}
    assert precision_yaml == {*PRECISIONS, "auto"} == {p.value for p in PrecisionName}
    model_yaml = {p.stem for p in (CONF_DIR / "model").glob("*.yaml")}
    assert model_yaml == {*MODEL_KINDS, "custom"}


def test_the_rules_ask_the_tables_not_name_lists():
    """xla=auto keeps XLA off for a convolutional model on CPU and task=sequence needs a per-token model, by the
    model table; loss scaling follows the precision table."""
    from dataclasses import replace

    from launcher.config.models import MODEL_KINDS
    from launcher.config.precisions import PRECISIONS

    assert MODEL_KINDS["cnn"].convolutional and not MODEL_KINDS["mlp"].convolutional
    assert resolve(config("model=cnn", "xla=auto"), CPU_PLAIN).step.xla is False
    assert MODEL_KINDS["transformer"].per_token
    with pytest.raises(Exception, match="model=transformer"):
        resolve(config("task=sequence", "model=mlp", "dataset=synthetic", "dataset.kind=tokens"), CPU_PLAIN)
    assert resolve(config("precision=mixed"), CPU_PLAIN).loss_scale.mode == "dynamic"
    patched = {**PRECISIONS, "bf16": replace(PRECISIONS["bf16"], needs_loss_scaling=True)}
    import launcher.plan.rules.loss_scale as rule

    original, rule.PRECISIONS = rule.PRECISIONS, patched
    try:
        assert resolve(config("precision=bf16"), CPU_PLAIN).loss_scale.mode == "dynamic"
    finally:
        rule.PRECISIONS = original


def test_a_custom_or_plugin_model_declares_what_it_is_in_its_config():
    """model=custom (or a plugin's YAML) fills the same facts the table holds for built-in models."""
    custom = ["model=custom", "model.builder=user_parts:linear", "xla=auto"]
    assert resolve(config(*custom), CPU_PLAIN).step.xla is True  # not convolutional: by the matmul rates
    plan = resolve(config(*custom, "model.convolutional=true"), CPU_PLAIN)
    assert plan.step.xla is False and "is convolutional" in plan.step.reason("xla")
    with pytest.raises(Exception, match="model=transformer"):
        resolve(config(*custom, "model.per_token=false", "task=sequence"), CPU_PLAIN)


@pytest.mark.parametrize("xla", ["false", "true"])
def test_a_global_batch_larger_than_the_training_data_is_refused_whatever_the_step(xla):
    """Issue 62, item 3: 16 training examples at batch 64 trained one ragged batch under xla=false, refused under
    xla=true (whose drop_remainder left no step)."""
    from launcher.config.errors import ConfigError

    cfg = config(f"xla={xla}")
    plan = resolve(cfg, CPU_PLAIN)
    with pytest.raises(ConfigError, match=r"a global batch \(64\) no larger than the 16 training examples"):
        schedule(cfg, plan, 16, 8)
    assert schedule(cfg, plan, 64, 8).schedule.steps_per_epoch == 1


def test_a_sweep_over_strategies_under_the_per_replica_rule_is_warned_that_its_batches_differ():
    """Issue 62, item 5: the mirrored jobs of `-m precision=... strategy=default,mirrored` ran global batch 128."""
    said = "this sweep varies the strategy under scaling.batch_rule=per_replica"
    warned = resolve(config("strategy=mirrored", "sweep.varies=[precision,strategy]"), CPU_PLAIN).warnings
    assert any(said in w and "(here 64 x 2 = 128)" in w and "scaling.batch_rule=global" in w for w in warned)
    for quiet in (
        ["strategy=default", "sweep.varies=[precision]"],
        ["strategy=mirrored", "sweep.varies=[strategy,scaling.batch_size]"],
        ["strategy=mirrored", "scaling=global", "sweep.varies=[strategy]"],
    ):
        assert not any(said in w for w in resolve(config(*quiet), CPU_PLAIN).warnings), quiet


def test_every_plan_line_fits_one_console_line_and_plan_yaml_keeps_the_whole_reason():
    from launcher.plan.reasons import CUT, LINE_WIDTH, brief

    long = "first clause that matters; " + "a detail that runs on " * 12
    assert len(brief(long, 60)) <= 60 and brief(long, 60).startswith("first clause that matters; a detail")
    short = brief(long, 60)
    assert short.endswith(f" {CUT}") and long.startswith(short[: -len(CUT) - 1] + " ")  # cut between words, marked
    assert brief("short enough", 60) == "short enough"
    assert brief("a; b", 3) == "a; b"  # no room to cut anything off: nothing is marked as cut
    formats = "export.formats=[keras,saved_model,tflite,my_company.ml.exports.onnx:OnnxWriter,other.pkg:CoreMLWriter]"
    shown = resolve(config(formats), CPU_PLAIN).render().split("Warnings:")[0].splitlines()
    assert any("export.formats" in line for line in shown) and all(len(line) <= LINE_WIDTH for line in shown)
    plan = resolve(config("precision=mixed"), CPU_PLAIN)
    shown = plan.render().splitlines()
    decisions = shown[1 : shown.index("Warnings:")]
    assert all(len(line) <= LINE_WIDTH for line in decisions)
    assert decisions[-1] == f"  ({CUT} the whole reason is in the run dir's plan.yaml)"
    cut = {line.split()[0]: line for line in decisions if line.endswith(CUT)}
    assert "numerics.on_nonfinite" in cut  # its reason runs to 178 characters on the line
    whole = plan.to_dict()["decisions"]["numerics.on_nonfinite"]["reason"]
    assert whole.startswith(cut["numerics.on_nonfinite"].split("  stop  ")[1].strip(f" {CUT}").strip())
    assert len(whole) > len(cut["numerics.on_nonfinite"].split("stop", 1)[1])
