"""How a step runs: whether XLA compiles it (xla=auto asks the model and the hardware), where, and how the
optimizer applies its update."""

from __future__ import annotations

from launcher.config.models import ModelKind, model_kind
from launcher.config.optimizers import OPTIMIZERS, xla_breaks
from launcher.config.schema import Config, OptimizerUpdate
from launcher.plan.data_facts import NO_FACTS, DataFacts
from launcher.plan.decisions import PrecisionPlan, StepPlan, StrategyPlan
from launcher.plan.environment import Environment
from launcher.plan.rules.findings import Findings

XLA_CHOICES = ("true", "false", "auto")
TUNE_CHOICES = ("off", "auto", "force")  # tune=: see launcher.launch.tuning
# XLA compiles the whole step when its matmuls run at least this fraction of oneDNN's: its fusion
# of the elementwise work then wins (float32 on an AMD EPYC without AMX: XLA 0.91x oneDNN's matmul,
# the XLA step 1.03x the hybrid one). Below it, oneDNN's matmuls are worth keeping.
XLA_MATMUL_FRACTION = 0.85
# bfloat16 under XLA is worth timing on a CPU only where XLA's bfloat16 matmuls beat its float32 ones by more than
# this (the matmul probe's noise).
XLA_BF16_GAIN = 0.05
# Optimizers the launcher applies with a fused TensorFlow kernel (one pass over each variable).
FUSED_KERNELS = {name: kind.fused_kernel for name, kind in OPTIMIZERS.items() if kind.fused_kernel}


def decide_step(
    config: Config,
    env: Environment,
    found: Findings,
    precision: PrecisionPlan,
    strategy: StrategyPlan,
    facts: DataFacts = NO_FACTS,
) -> StepPlan:
    xla = _decide_xla(config, env, found, precision, facts)
    update = _decide_update(config, env, found, whole_step_compiled=xla[0] and strategy.replicas == 1)
    return StepPlan.of(
        xla=xla,
        update=update,
        kind=_step_kind(xla[0], update[0] == OptimizerUpdate.fused.value, strategy.replicas),
        steps_per_execution=_steps_per_call(config, env),
    )


def _steps_per_call(config: Config, env: Environment) -> tuple[int, str]:
    if env.tuned is not None and env.tuned.steps_per_execution:
        return env.tuned.steps_per_execution, (
            f"tune: {env.tuned.steps_per_execution} steps per call timed faster than "
            f"train.steps_per_execution={config.train.steps_per_execution} ({env.tuned.table})"
        )
    return config.train.steps_per_execution, "steps run per tf.function call (in-graph loop)"


def why_xla_cannot_compile(facts: DataFacts) -> str:
    """Why XLA cannot compile this model's step ("" when it can): its inputs are strings, or it holds layers Keras
    marks supports_jit=False."""
    if facts.string_inputs:
        return (
            f"the model takes string inputs ({facts.shown_strings}): XLA compiles no string tensors, nor the lookup "
            "tables of the layers that read them (StringLookup, TextVectorization, Hashing: Keras marks them "
            "supports_jit=False)"
        )
    if facts.uncompilable_layers:
        return (
            f"the built model has layers Keras marks supports_jit=False ({facts.shown_layers}): lookup tables and "
            "string ops do not compile"
        )
    return ""


def _decide_xla(
    config: Config, env: Environment, found: Findings, precision: PrecisionPlan, facts: DataFacts
) -> tuple[bool, str]:
    if str(config.tune) not in TUNE_CHOICES:
        found.refuse("tune", config.tune, f"one of {list(TUNE_CHOICES)}", "tune=auto")
    raw = str(config.xla).strip().lower()
    if raw not in XLA_CHOICES:
        found.refuse("xla", config.xla, f"one of {list(XLA_CHOICES)}", "xla=auto")
        raw = "false"
    breaks = xla_breaks(config.optimizer.name)
    if raw == "true" and breaks:
        found.warn(f"xla=true with optimizer.name={config.optimizer.name}: {breaks}. Use xla=false (or xla=auto).")
    strings = why_xla_cannot_compile(facts)
    if raw == "true" and strings:
        found.refuse(
            "xla",
            raw,
            f"xla=false or auto for this model: {strings}",
            'xla=auto (the graph step), or move them into the loader\'s "preprocess" (it runs in the data pipeline, '
            "outside the compiled step) and keep xla=true",
        )
    if raw != "auto":
        return raw == "true", "requested"
    if strings:
        return False, f"xla=auto: {strings}"
    if breaks:
        return False, f"xla=auto: optimizer.name={config.optimizer.name}: {breaks}"
    if env.tuned is not None:
        return env.tuned.xla, f"xla=auto, tune: the fastest step timed here ({env.tuned.table})"
    xla, reason = auto_xla(env, precision, model_kind(config.model))
    return xla, f"xla=auto: {reason}"


def slow_xla_convolutions(env: Environment, model: ModelKind) -> str:
    """Why XLA stays off for this model on this machine ("" where it does not): the rule and tune=auto's candidates
    both read it."""
    if env.gpus or not model.convolutional:
        return ""
    return (
        f"CPU, model={model.name} is convolutional: XLA's CPU convolutions are slower than oneDNN's "
        "(measured on the benchmark convnet: the XLA step trains at 0.53x the graph step on a Xeon, "
        "0.24-0.62x on AMD EPYCs, all without AMX)"
    )


def slow_xla_bfloat16(env: Environment) -> str:
    """Why bfloat16 under XLA cannot beat float32 under XLA on this machine ("" where it might): XLA's CPU matmuls
    in bfloat16 are measured no faster than in float32, and XLA fuses the elementwise work in both. tune=auto
    leaves that candidate out when float32 under XLA is timed beside it."""
    if env.gpus:
        return ""
    bf16, fp32 = env.matmul_rate("bfloat16", "xla"), env.matmul_rate("float32", "xla")
    if not (bf16 and fp32) or bf16 > (1 + XLA_BF16_GAIN) * fp32:
        return ""
    return (
        f"CPU, XLA's bfloat16 matmuls no faster than its float32 (measured here, 2048^3: {bf16:.0f} vs "
        f"{fp32:.0f} GFLOP/s): bf16 under XLA only rounds more than fp32 under XLA (in every timing "
        "table of the MLP, CNN and LM on AMD EPYCs and a Xeon with AMX it ran 1% faster at best)"
    )


def auto_xla(env: Environment, precision: PrecisionPlan, model: ModelKind) -> tuple[bool, str]:
    if env.gpus:
        return True, "GPU: XLA fuses elementwise ops around the matmuls"
    if slow_convolutions := slow_xla_convolutions(env, model):
        return False, slow_convolutions
    dtype = precision.compute_dtype
    graph, xla = env.matmul_rate(dtype, "graph"), env.matmul_rate(dtype, "xla")
    if graph and xla:
        measured = f"measured here, 2048^3 {dtype} matmul: XLA {xla:.0f} vs oneDNN {graph:.0f} GFLOP/s"
        if xla >= XLA_MATMUL_FRACTION * graph:
            return True, f"{measured}; XLA keeps pace and fuses the whole step, the optimizer update included"
        return False, f"{measured}; the graph step keeps oneDNN's faster matmuls"
    if not precision.mixed:
        return True, (
            "CPU float32: XLA fuses the step, the optimizer update included "
            "(measured 1.07-1.2x the graph step on a 3x2048 MLP, Xeon without AMX; "
            "matmul rates not measured here)"
        )
    if env.has_amx:
        return False, (
            f"CPU {precision.name} with AMX: the graph step uses oneDNN's AMX kernels, XLA's CPU "
            "backend does not (~5x slower matmuls)"
        )
    return True, f"CPU {precision.name} without AMX, matmul rates not measured: XLA fuses the step"


def _decide_update(config: Config, env: Environment, found: Findings, whole_step_compiled: bool) -> tuple[str, str]:
    optimizer = str(config.optimizer.name).strip()
    kernel = FUSED_KERNELS.get(optimizer)
    update = config.optimizer.update
    if update == OptimizerUpdate.fused and kernel is None:
        found.refuse(
            "optimizer.update",
            "fused",
            f"keras or auto for optimizer={optimizer} (fused kernels exist for {sorted(FUSED_KERNELS)})",
            "optimizer.update=auto",
        )
        update = OptimizerUpdate.keras
    if update != OptimizerUpdate.auto:
        return update.value, f"requested ({kernel})" if update == OptimizerUpdate.fused else "requested"
    if kernel is None:
        return (
            OptimizerUpdate.keras.value,
            f"update=auto: no fused update for optimizer={optimizer}: Keras's update ops",
        )
    if whole_step_compiled:
        return OptimizerUpdate.keras.value, "update=auto: XLA compiles the update with the step and fuses it"
    if env.tuned is not None and env.tuned.update:
        return env.tuned.update, f"update=auto, tune: the fastest step timed here ({env.tuned.table})"
    return OptimizerUpdate.fused.value, (
        f"update=auto: {kernel}, one pass over each variable instead of Keras's ~10 elementwise "
        "ops (measured, MLP step: 1.26x bf16, 1.15x fp32 on an AMD EPYC without AMX)"
    )


def _step_kind(xla: bool, fused: bool, replicas: int) -> tuple[str, str]:
    if not xla:
        if fused:
            return "hybrid", (
                "forward/backward as a tf.function graph (oneDNN kernels), the update "
                "in fused TensorFlow kernels; no XLA anywhere"
            )
        return "graph", "tf.function step, Keras's update ops, no XLA"
    if replicas > 1:
        return "replica_xla", (
            "XLA under a multi-replica strategy: forward/backward compiled inside strategy.run, "
            "cross-replica gradient apply outside the compiled function (jit_compile around "
            "strategy.run fails: variables live on several devices)"
        )
    return "fused_xla", "one replica: the whole step (forward, backward, apply) is compiled"
