"""What the loaded data tells the resolver (`launcher.plan.data_facts`): a model of string inputs is never given
what it cannot build or run by `auto` (issue 63, item 10: precision=auto chose bf16 and the builder failed;
xla=auto chose replica_xla and the run ended FAILED), and an explicit xla=true is refused with the fix."""

from __future__ import annotations

import dataclasses

import pytest
from fakes import CPU_AMX, ONE_A100, TWO_A100
from support.config import config

from launcher.config.errors import ConfigError
from launcher.plan.data_facts import NO_FACTS, DataFacts
from launcher.plan.environment import TunedStep
from launcher.plan.resolve import resolve

STRINGS = DataFacts(string_inputs=("color", "text"))


@pytest.mark.parametrize(
    ("env", "strategy", "chosen"),
    [
        (ONE_A100, "default", ("bf16", True, "fused_xla")),
        (TWO_A100, "mirrored", ("bf16", True, "replica_xla")),
        (CPU_AMX, "default", ("bf16", False, "hybrid")),
    ],
)
def test_auto_keeps_a_model_of_string_inputs_in_float32_without_xla(env, strategy, chosen):
    overrides = ("precision=auto", "xla=auto", f"strategy={strategy}")
    numbers = resolve(config(*overrides), env, NO_FACTS)
    assert (numbers.precision.name, numbers.step.xla, numbers.step.kind) == chosen  # what auto picks for numbers
    plan = resolve(config(*overrides), env, STRINGS)
    assert (plan.precision.name, plan.precision.policy, plan.step.xla) == ("fp32", "float32", False)
    assert plan.step.kind in ("graph", "hybrid")
    assert "string inputs ('color', 'text')" in plan.precision.reason("name")
    assert "XLA compiles no string tensors" in plan.step.reason("xla") and "supports_jit=False" in (
        plan.step.reason("xla")
    )
    assert "string inputs ('color', 'text')" in plan.render()  # the Plan says why


def test_a_precision_asked_for_by_name_is_kept_and_a_tuned_choice_gives_way_to_the_strings():
    assert resolve(config("precision=bf16", "xla=auto"), ONE_A100, STRINGS).precision.name == "bf16"
    tuned = dataclasses.replace(ONE_A100, tuned=TunedStep(precision="bf16", xla=True, table="timed"))
    plan = resolve(config("precision=auto", "xla=auto", "tune=auto"), tuned, STRINGS)
    assert (plan.precision.name, plan.step.xla) == ("fp32", False)


def test_xla_true_with_string_inputs_is_refused_with_a_fix_that_works():
    with pytest.raises(ConfigError) as err:
        resolve(config("precision=fp32", "xla=true"), ONE_A100, DataFacts(string_inputs=("inputs",)))
    (violation,) = err.value.violations
    assert (violation.key, violation.value) == ("xla", "true")
    assert "xla=false or auto for this model: the model takes string inputs ('inputs')" in violation.expected
    assert violation.fix.startswith("xla=auto (the graph step)")
    fixed = resolve(config("precision=fp32", "xla=auto"), ONE_A100, DataFacts(string_inputs=("inputs",)))
    assert not fixed.step.xla
