"""Which precision (and so which dtype policy) the run uses; `auto` asks the hardware."""

from __future__ import annotations

from launcher.config.precisions import PRECISIONS, auto_choice, overflow_safe
from launcher.config.schema import Config, PrecisionName
from launcher.plan.data_facts import NO_FACTS, DataFacts
from launcher.plan.decisions import PrecisionPlan
from launcher.plan.environment import FAST_BF16_RATIO, Environment
from launcher.plan.rules.findings import Findings


def auto_precision(env: Environment) -> tuple[str, str]:
    """precision=auto by the hardware: the precision table's choice (`auto_choice`), with its entry's reason, or on
    a CPU whose matmul rates were measured, the measurement its bfloat16 fast path was judged by."""
    choice = auto_choice(env)
    bf16, fp32 = env.best_matmul_rate("bfloat16"), env.best_matmul_rate("float32")
    if env.gpu_min_capability is None and bf16 and fp32:
        measured = (
            f"measured here, 2048^3 matmul: bfloat16 {bf16:.0f} GFLOP/s vs float32 {fp32:.0f} "
            f"({bf16 / fp32:.2f}x; bf16 needs >= {FAST_BF16_RATIO}x)"
        ) + (f"; {env.matmul_trust}" if env.matmul_trust else "")
        return choice.name, measured
    return choice.name, choice.auto_reason(env)


def float32_for_this_model(facts: DataFacts) -> tuple[str, str] | None:
    """precision=auto for a model of string inputs, or whose builder runs under float32 only: float32, and why
    (None: neither)."""
    float32 = next(p for p in PRECISIONS.values() if not p.mixed)
    if facts.float32_builder and not facts.string_inputs:
        return float32.name, (
            f"precision=auto: the builder fails under {facts.float32_builder} and runs under float32 (what it adapts "
            "or builds needs float32), so auto keeps float32; or give those layers dtype='float32' and ask for "
            "another precision by name"
        )
    if not facts.string_inputs:
        return None
    return float32.name, (
        f"precision=auto: the model takes string inputs ({facts.shown_strings}): the lookup layers that read them, and "
        "what a builder adapts beside them, are Keras's float32 preprocessing (under mixed_bfloat16 FeatureSpace "
        "and Normalization.adapt on a tf.data fail: cannot compute AddV2 ... bfloat16), so auto keeps float32; "
        "ask for another precision by name"
    )


def decide_precision(config: Config, env: Environment, found: Findings, facts: DataFacts = NO_FACTS) -> PrecisionPlan:
    requested = config.precision.name
    if requested == PrecisionName.auto and (kept := float32_for_this_model(facts)):
        name, reason = kept
    elif requested == PrecisionName.auto and env.tuned is not None:
        name, reason = env.tuned.precision, f"precision=auto, tune: the fastest step timed here ({env.tuned.table})"
    elif requested == PrecisionName.auto:
        name, reason = auto_precision(env)
        reason = f"precision=auto: {reason}"
    else:
        name, reason = requested.value, "requested"
    precision = PRECISIONS[name]
    if precision.needs_loss_scaling and not precision.fast_on(env):
        faster = [p for p in overflow_safe() if p.fast_on(env)]
        hint = f" Use precision={faster[0].name}: this hardware runs {faster[0].compute_dtype} fast." if faster else ""
        found.warn(
            f"precision={name} ({precision.compute_dtype}) on hardware without a {precision.compute_dtype} fast path "
            f"({env.describe_devices()}): {precision.compute_dtype} math is emulated and can be many times "
            f"slower than float32 on large layers.{hint}"
        )
    layers = list(config.precision.float32_layers)
    if layers and not precision.mixed:
        found.warn(f"precision.float32_layers={layers} is unused with a float32 policy: every layer is float32.")
    return PrecisionPlan.of(
        name=(name, reason),
        policy=(precision.policy, f"Keras dtype policy for {name}"),
        compute_dtype=(
            precision.compute_dtype,
            "what matmuls and activations compute in"
            + ("; variables stay float32" if precision.mixed and precision.float32_variables else ""),
        ),
        output_dtype=(
            "float32",
            "the last layer computes in float32 under a mixed policy (softmax and loss need the range)",
        )
        if precision.mixed
        else None,
        float32_layers=(
            layers,
            "requested: these layers compute in float32 (float32 range), the rest in the mixed policy",
        )
        if layers and precision.mixed
        else None,
    )
