"""resolve(config, environment) -> Plan: the launcher's knowledge of what works together.

Pure: no TensorFlow, no files. Each rule reads the config, the environment and
the decisions of earlier rules, records its own decisions with a reason, and
appends violations instead of raising, so one ConfigError lists them all.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from launcher.config.bounds import out_of_bounds
from launcher.config.errors import Violation, raise_if_any
from launcher.config.schema import (
    BatchRule,
    Config,
    LossScaleImpl,
    LossScaleMode,
    LrRule,
    LrSchedule,
    OnNonfinite,
    OptimizerUpdate,
    PrecisionName,
    StrategyKind,
)
from launcher.config.tasks import (
    ALL_METRICS,
    TASKS,
    is_import_path,
    known_epoch_metrics,
    loss_name,
    metric_names,
    monitor_problems,
    objective,
)
from launcher.plan.cluster import Cluster, find_cluster
from launcher.plan.decisions import Plan
from launcher.plan.environment import FAST_BF16_RATIO, Environment

POLICIES = {"fp32": "float32", "mixed": "mixed_float16", "bf16": "mixed_bfloat16"}
XLA_CHOICES = ("true", "false", "auto")
DEFAULT_LOGICAL_CPUS = 2

Rule = Callable[[Config, Environment, Plan, list], None]


def resolve(cfg: Config, env: Environment) -> Plan:
    """Check the combination and decide everything; raise ConfigError listing every problem."""
    plan, violations = resolve_all(cfg, env)
    raise_if_any(violations)
    return plan


def resolve_all(cfg: Config, env: Environment) -> tuple[Plan, list[Violation]]:
    """Run every rule: the Plan as far as it could be decided, and every violation found.

    The launch checks the data against this partial Plan too, so one message lists them all.
    """
    plan = Plan()
    violations: list[Violation] = []
    for rule in RULES:
        rule(cfg, env, plan, violations)
    return plan, violations


# ----------------------------------------------------------------- precision


def _auto_precision(env: Environment) -> tuple[str, str]:
    capability = env.gpu_min_capability
    if capability is not None:
        if capability >= (8, 0):
            return "bf16", f"GPU compute capability {capability[0]}.{capability[1]} >= 8.0 has bfloat16 tensor cores"
        if capability >= (7, 0):
            return (
                "mixed",
                f"GPU compute capability {capability[0]}.{capability[1]} has float16 tensor cores but no bfloat16",
            )
        return "fp32", f"GPU compute capability {capability[0]}.{capability[1]} < 7.0 has no fast reduced precision"
    bf16, fp32 = env.best_matmul_rate("bfloat16"), env.best_matmul_rate("float32")
    if bf16 and fp32:
        measured = (f"measured here, 2048^3 matmul: bfloat16 {bf16:.0f} GFLOP/s vs float32 {fp32:.0f} "
                    f"({bf16 / fp32:.2f}x; bf16 needs >= {FAST_BF16_RATIO}x)")
        return ("bf16" if env.cpu_has_fast_bf16 else "fp32"), measured
    if env.cpu_has_fast_bf16:
        return "bf16", "CPU has AMX: oneDNN runs bfloat16 matmuls several times faster than float32 (not measured)"
    return "fp32", "CPU without AMX and matmul rates not measured: float32 is the safe choice"


def rule_precision(cfg: Config, env: Environment, plan: Plan, violations: list) -> None:
    requested = cfg.precision.name
    if requested == PrecisionName.auto:
        precision, reason = _auto_precision(env)
        reason = f"precision=auto: {reason}"
    else:
        precision, reason = requested.value, "requested"
    plan.decide("precision", precision, reason)
    plan.decide("precision.policy", POLICIES[precision], f"Keras dtype policy for {precision}")
    if precision == "mixed" and not _has_fp16_fast_path(env):
        hint = " Use precision=bf16: this hardware runs bfloat16 fast." if _has_bf16_fast_path(env) else ""
        plan.warn(
            "precision=mixed (float16) on hardware without a float16 fast path "
            f"({env.describe_devices()}): float16 math is emulated and can be many times "
            f"slower than float32 on large layers.{hint}"
        )
    if precision != "fp32":
        plan.decide(
            "model.output_dtype",
            "float32",
            "the last layer computes in float32 under a mixed policy (softmax and loss need the range)",
        )


def _has_fp16_fast_path(env: Environment) -> bool:
    capability = env.gpu_min_capability
    return capability is not None and capability >= (7, 0)


def _has_bf16_fast_path(env: Environment) -> bool:
    capability = env.gpu_min_capability
    if capability is not None:
        return capability >= (8, 0)
    return env.cpu_has_fast_bf16


# ------------------------------------------------------------------ strategy


def rule_strategy(cfg: Config, env: Environment, plan: Plan, violations: list) -> None:
    kind = cfg.strategy.kind
    handler = {
        StrategyKind.default: _default_strategy,
        StrategyKind.one_device: _one_device_strategy,
        StrategyKind.mirrored: _mirrored_strategy,
        StrategyKind.multi_worker: _multi_worker_strategy,
    }[kind]
    handler(cfg, env, plan, violations)


def _default_strategy(cfg, env, plan, violations) -> None:
    device = "/gpu:0" if env.gpus else "/cpu:0"
    plan.decide("strategy", "default", "requested: one device, no tf.distribute wrapping")
    plan.decide("strategy.devices", [device], f"found {env.describe_devices()}")
    plan.decide("strategy.logical_cpus", 0, "no CPU split needed")
    plan.decide("replicas", 1, "one device")


def _one_device_strategy(cfg, env, plan, violations) -> None:
    wanted = cfg.strategy.device.strip().lower()
    if wanted == "auto":
        device = "/gpu:0" if env.gpus else "/cpu:0"
        reason = f"device=auto picked {device}; found {env.describe_devices()}"
    else:
        device, reason = wanted, "requested"
        problem = _device_problem(wanted, env)
        if problem:
            valid = ["auto", "/cpu:0", *(f"/gpu:{i}" for i in range(len(env.gpus)))]
            violations.append(
                Violation(
                    "strategy.device",
                    cfg.strategy.device,
                    f"one of {valid} ({problem}; found {env.describe_devices()})",
                    "strategy.device=auto",
                )
            )
    plan.decide("strategy", "one_device", "requested: OneDeviceStrategy")
    plan.decide("strategy.devices", [device], reason)
    plan.decide("strategy.logical_cpus", 0, "no CPU split needed")
    plan.decide("replicas", 1, "one device")


def _device_problem(device: str, env: Environment) -> str | None:
    kind, _, index = device.lstrip("/").partition(":")
    if kind not in ("cpu", "gpu") or not index.isdigit():
        return "not a device string"
    if kind == "gpu" and int(index) >= len(env.gpus):
        return f"there is no GPU {index}"
    if kind == "cpu" and int(index) != 0:
        return "only /cpu:0 exists"
    return None


def _mirrored_strategy(cfg, env, plan, violations) -> None:
    wanted = cfg.strategy.devices
    plan.decide("strategy", "mirrored", "requested: MirroredStrategy (synchronous data parallel)")
    wanted = max(wanted, 0)  # a negative count is reported by the bounds table
    if env.gpus:
        if wanted > len(env.gpus):
            violations.append(
                Violation(
                    "strategy.devices",
                    wanted,
                    f"at most {len(env.gpus)} (found {env.describe_devices()})",
                    f"strategy.devices={len(env.gpus)} or strategy.devices=0 for all GPUs",
                )
            )
        count = wanted or len(env.gpus)
        devices = [f"/gpu:{i}" for i in range(count)]
        plan.decide("strategy.devices", devices, f"found {env.describe_devices()}")
        plan.decide("strategy.logical_cpus", 0, "GPUs are the replicas")
        if count == 1:
            plan.warn("strategy=mirrored with 1 GPU runs a single replica; it adds overhead and no speed.")
    else:
        count = wanted or DEFAULT_LOGICAL_CPUS
        devices = [f"/cpu:{i}" for i in range(count)]
        plan.decide(
            "strategy.devices",
            devices,
            f"adapted: {env.describe_devices()}, so the CPU is split into {count} logical devices "
            "(the same mirrored code path, exercised on CPU)",
        )
        plan.decide("strategy.logical_cpus", count, "configured before the TF runtime starts")
        if count > env.cpu_count:
            plan.warn(f"{count} logical CPU devices on {env.cpu_count} cores: replicas share cores.")
    plan.decide("replicas", max(count, 1), f"{count} mirrored device(s)")


def _multi_worker_strategy(cfg, env, plan, violations) -> None:
    plan.decide("strategy", "multi_worker", "requested: MultiWorkerMirroredStrategy")
    strategy = cfg.strategy
    local = max(len(env.gpus), 1)
    device = "/gpu" if env.gpus else "/cpu"
    if strategy.local_workers:
        # This process only starts and watches the workers; each of them resolves its own Plan.
        workers = [f"127.0.0.1:<free port {i}>" for i in range(strategy.local_workers)]
        plan.decide("strategy.local_workers", strategy.local_workers,
                    "started on this machine, each a process of its own on a free 127.0.0.1 port")
        cluster = Cluster(tuple(workers), 0, "strategy.local_workers")
    else:
        cluster, problems = find_cluster(strategy, env.tf_config, env.slurm)
        violations.extend(problems)
        cluster = cluster or Cluster(("localhost:0",), 0, "none")
    plan.decide("strategy.cluster", list(cluster.workers), f"from {cluster.source}")
    plan.decide("strategy.task_index", cluster.index, f"this worker is {cluster.task[0]} {cluster.task[1]}")
    plan.decide(
        "process.is_chief", cluster.is_chief,
        "this worker logs to MLflow, exports the model and writes the checkpoints" if cluster.is_chief
        else "not the chief: trains, saves into a temporary directory removed after each save, resumes from "
             "the chief's checkpoints; leaves MLflow and export to the chief",
    )
    _communication(strategy, env, plan, violations)
    plan.decide("strategy.connect_timeout", float(strategy.connect_timeout),
                "seconds this worker waits for its peers at start-up before stopping with their addresses")
    plan.decide(
        "strategy.devices", [f"{device}:{i}" for i in range(local)], f"per worker; found {env.describe_devices()}"
    )
    plan.decide("strategy.logical_cpus", 0, "one CPU device per worker")
    plan.decide("replicas", len(cluster.workers) * local, f"{len(cluster.workers)} worker(s) x {local} device(s)")


def _communication(strategy, env, plan, violations) -> None:
    wanted = strategy.communication.value
    if wanted == "nccl" and not env.gpus:
        violations.append(Violation("strategy.communication", "nccl", "ring or auto on a machine without GPUs "
                                    "(NCCL runs on GPUs only)", "strategy.communication=auto"))
    if wanted != "auto":
        plan.decide("strategy.communication", wanted, "requested")
    elif env.gpus:
        plan.decide("strategy.communication", "nccl", "auto: GPUs all-reduce fastest through NCCL")
    else:
        plan.decide("strategy.communication", "ring",
                    "auto: no GPU, so gradients are all-reduced over gRPC by TensorFlow's ring collectives")


# ----------------------------------------------------------------------- XLA


def wants_measurements(cfg: Config) -> bool:
    """precision=auto and xla=auto decide by this machine's measured matmul rates.

    Not under multi_worker: workers on different machines (or measuring under different load)
    could decide differently, and every worker must run the same step. They decide by flags.
    """
    if cfg.strategy.kind == StrategyKind.multi_worker:
        return False
    return cfg.precision.name == PrecisionName.auto or str(cfg.xla).strip().lower() == "auto"


def rule_xla(cfg: Config, env: Environment, plan: Plan, violations: list) -> None:
    raw = str(cfg.xla).strip().lower()
    if raw not in XLA_CHOICES:
        violations.append(Violation("xla", cfg.xla, f"one of {list(XLA_CHOICES)}", "xla=auto"))
        raw = "false"
    precision = plan.get("precision", "fp32")
    if raw == "auto":
        xla, reason = _auto_xla(env, precision, str(cfg.model.name))
        reason = f"xla=auto: {reason}"
    else:
        xla, reason = raw == "true", "requested"
    plan.decide("xla", xla, reason)


CONV_MODELS = ("cnn", "resnet")
COMPUTE_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "mixed": "float16"}
# XLA compiles the whole step when its matmuls run at least this fraction of oneDNN's: its fusion
# of the elementwise work then wins (float32 on an AMD EPYC without AMX: XLA 0.91x oneDNN's matmul,
# the XLA step 1.03x the hybrid one). Below it, oneDNN's matmuls are worth keeping.
XLA_MATMUL_FRACTION = 0.85


def _auto_xla(env: Environment, precision: str, model: str) -> tuple[bool, str]:
    if env.gpus:
        return True, "GPU: XLA fuses elementwise ops around the matmuls"
    if model in CONV_MODELS:
        return False, (
            f"CPU, model={model}: XLA's CPU convolutions are slower than oneDNN's "
            "(measured on the benchmark convnet: the XLA step trains at 0.53x the graph step on a Xeon, "
            "0.62x on an AMD EPYC, both without AMX)"
        )
    dtype = COMPUTE_DTYPE[precision]
    graph, xla = env.matmul_rate(dtype, "graph"), env.matmul_rate(dtype, "xla")
    if graph and xla:
        measured = f"measured here, 2048^3 {dtype} matmul: XLA {xla:.0f} vs oneDNN {graph:.0f} GFLOP/s"
        if xla >= XLA_MATMUL_FRACTION * graph:
            return True, f"{measured}; XLA keeps pace and fuses the whole step, the optimizer update included"
        return False, f"{measured}; the graph step keeps oneDNN's faster matmuls"
    if precision == "fp32":
        return True, ("CPU float32: XLA fuses the step, the optimizer update included "
                      "(measured 1.07-1.2x the graph step on a 3x2048 MLP, Xeon without AMX; "
                      "matmul rates not measured here)")
    if env.has_amx:
        return False, (
            f"CPU {precision} with AMX: the graph step uses oneDNN's AMX kernels, XLA's CPU "
            "backend does not (~5x slower matmuls)"
        )
    return True, f"CPU {precision} without AMX, matmul rates not measured: XLA fuses the step"


# ------------------------------------------------------------------------ step

# Optimizers with a fused TensorFlow apply kernel (one pass over each variable).
FUSED_KERNELS = {
    "adam": "ResourceApplyAdam",
    "adamw": "ResourceApplyAdam after Keras's decoupled weight decay",
    "sgd": "ResourceApplyKerasMomentum (ResourceApplyGradientDescent without momentum)",
}


def rule_step(cfg: Config, env: Environment, plan: Plan, violations: list) -> None:
    """How a step runs: where XLA compiles, and how the optimizer applies its update."""
    xla = plan.get("xla", False)
    replicas = plan.get("replicas", 1)
    optimizer = cfg.optimizer.name.value
    kernel = FUSED_KERNELS.get(optimizer)
    update = cfg.optimizer.update
    if update == OptimizerUpdate.fused and kernel is None:
        violations.append(Violation("optimizer.update", "fused", f"keras or auto for optimizer={optimizer} "
                                    f"(fused kernels exist for {sorted(FUSED_KERNELS)})", "optimizer.update=auto"))
        update = OptimizerUpdate.keras
    whole_step_compiled = xla and replicas == 1
    if update == OptimizerUpdate.auto:
        if kernel is None:
            update, why = OptimizerUpdate.keras, f"update=auto: optimizer={optimizer} has no fused kernel"
        elif whole_step_compiled:
            update, why = OptimizerUpdate.keras, "update=auto: XLA compiles the update with the step and fuses it"
        else:
            update, why = OptimizerUpdate.fused, (
                f"update=auto: {kernel}, one pass over each variable instead of Keras's ~10 elementwise "
                "ops (measured, MLP step: 1.26x bf16, 1.15x fp32 on an AMD EPYC without AMX)")
    else:
        why = f"requested ({kernel})" if update == OptimizerUpdate.fused else "requested"
    fused = update == OptimizerUpdate.fused
    plan.decide("optimizer.update", update.value, why)
    if not xla:
        if fused:
            plan.decide("step", "hybrid", "forward/backward as a tf.function graph (oneDNN kernels), the update "
                        "in fused TensorFlow kernels; no XLA anywhere")
        else:
            plan.decide("step", "graph", "tf.function step, Keras's update ops, no XLA")
    elif replicas > 1:
        plan.decide(
            "step",
            "replica_xla",
            "XLA under a multi-replica strategy: forward/backward compiled inside strategy.run, "
            "cross-replica gradient apply outside the compiled function (jit_compile around "
            "strategy.run fails: variables live on several devices)",
        )
    else:
        plan.decide("step", "fused_xla", "one replica: the whole step (forward, backward, apply) is compiled")


# ---------------------------------------------------------------- loss scale


def rule_loss_scale(cfg: Config, env: Environment, plan: Plan, violations: list) -> None:
    ls = cfg.loss_scale
    precision = plan.get("precision", "fp32")
    mode = ls.mode
    if precision != "mixed":
        if mode in (LossScaleMode.dynamic, LossScaleMode.fixed):
            plan.warn(
                f"loss_scale={mode.value} is unused with precision={precision}: only float16 "
                "gradients underflow. Drop the override (loss_scale=auto)."
            )
        if cfg.train.on_nonfinite == OnNonfinite.skip:
            # Only a loss-scale optimizer skips a step; at scale 1 it changes nothing else.
            plan.decide("loss_scale.mode", "fixed", "train.on_nonfinite=skip: a fixed scale of 1 (no scaling)")
            plan.decide("loss_scale.value", 1.0, "scaling by 1 leaves the gradients as they are")
            plan.decide("loss_scale.optimizer", "replica_safe",
                        "train.on_nonfinite=skip: it skips a non-finite step on every replica together")
            return
        plan.decide("loss_scale.mode", "none", f"{precision} gradients do not underflow")
        plan.decide("loss_scale.optimizer", "none", "no loss scaling")
        return
    if mode == LossScaleMode.none:
        violations.append(
            Violation(
                "loss_scale",
                "none",
                "dynamic or fixed with precision=mixed (float16 gradients underflow to zero without scaling)",
                "loss_scale=dynamic (or loss_scale=auto)",
            )
        )
        return
    if mode == LossScaleMode.fixed:
        _check_fixed(ls, plan, violations)
        plan.decide("loss_scale.mode", "fixed", f"requested: scale stays at {ls.value:g}")
        plan.decide("loss_scale.value", ls.value, "requested")
    else:
        _check_dynamic(ls, violations)
        why = "requested" if mode == LossScaleMode.dynamic else "loss_scale=auto: mixed needs loss scaling"
        plan.decide("loss_scale.mode", "dynamic", why)
    _choose_lso(cfg, plan, violations)


def _check_fixed(ls, plan: Plan, violations: list) -> None:
    if ls.value > 0 and not math.log2(ls.value).is_integer():
        plan.warn(f"loss_scale.value={ls.value:g} is not a power of 2: scaling then rounds gradients.")


def _check_dynamic(ls, violations: list) -> None:
    if not ls.min_scale <= ls.initial_scale <= ls.max_scale:
        violations.append(
            Violation(
                "loss_scale.initial_scale",
                ls.initial_scale,
                f"min_scale ({ls.min_scale:g}) <= initial_scale <= max_scale ({ls.max_scale:g})",
                "loss_scale.initial_scale=32768 loss_scale.min_scale=1 loss_scale.max_scale=16777216",
            )
        )


def _choose_lso(cfg: Config, plan: Plan, violations: list) -> None:
    impl = cfg.loss_scale.implementation
    replicas = plan.get("replicas", 1)
    xla = plan.get("xla", False)
    fixed = plan.get("loss_scale.mode") == "fixed"
    if impl == LossScaleImpl.stock:
        if fixed:
            violations.append(
                Violation(
                    "loss_scale.implementation",
                    "stock",
                    "replica_safe or auto with loss_scale=fixed (Keras 3's LossScaleOptimizer has no fixed mode)",
                    "loss_scale.implementation=auto",
                )
            )
        elif replicas > 1 and xla:
            violations.append(
                Violation(
                    "loss_scale.implementation",
                    "stock",
                    "replica_safe or auto with float16 + a multi-replica strategy + XLA (the stock "
                    "LossScaleOptimizer crashes there: merge_call inside a compiled step, keras#21366)",
                    "loss_scale.implementation=auto, or xla=false",
                )
            )
        elif replicas > 1:
            plan.warn(
                "loss_scale.implementation=stock with several replicas: Keras checks for overflow on "
                "the first replica's gradients only, so another replica's inf/nan reaches the weights."
            )
        plan.decide("loss_scale.optimizer", "stock", "requested: keras.optimizers.LossScaleOptimizer")
        return
    if impl == LossScaleImpl.replica_safe:
        plan.decide("loss_scale.optimizer", "replica_safe", "requested")
        return
    if replicas > 1:
        crash = " the stock one crashes under XLA (merge_call inside the compiled step, keras#21366) and" if xla else ""
        plan.decide(
            "loss_scale.optimizer",
            "replica_safe",
            f"float16 with {replicas} replicas:{crash} checks overflow on the first replica's un-reduced "
            "gradients only; replica_safe all-reduces first, so every replica skips or applies together",
        )
    elif fixed:
        plan.decide("loss_scale.optimizer", "replica_safe", "fixed mode: Keras 3's LossScaleOptimizer is dynamic only")
    else:
        plan.decide("loss_scale.optimizer", "stock", "one replica: keras.optimizers.LossScaleOptimizer works")


# ------------------------------------------------------------ batch and lr


def rule_batch(cfg: Config, env: Environment, plan: Plan, violations: list) -> None:
    sc = cfg.scaling
    replicas = plan.get("replicas", 1)
    if sc.batch_size < 1:
        return  # reported by the bounds table
    if sc.batch_rule == BatchRule["per_replica"]:
        per_replica, global_batch = sc.batch_size, sc.batch_size * replicas
        plan.decide("batch.global", global_batch, f"batch_rule=per_replica: {per_replica} x {replicas} replica(s)")
        plan.decide("batch.per_replica", per_replica, "requested")
    else:
        global_batch = sc.batch_size
        if global_batch % replicas:
            lower = max(replicas, global_batch // replicas * replicas)
            violations.append(
                Violation(
                    "scaling.batch_size",
                    global_batch,
                    f"a multiple of the {replicas} replicas with batch_rule=global",
                    f"scaling.batch_size={lower} or {lower + replicas}, or scaling=per_replica",
                )
            )
            return
        plan.decide("batch.global", global_batch, "batch_rule=global: requested")
        plan.decide("batch.per_replica", global_batch // replicas, f"{global_batch} / {replicas} replica(s)")
    accumulate = cfg.optimizer.gradient_accumulation_steps
    if accumulate > 1:
        micro = plan["batch.per_replica"]
        plan.decide("batch.micro", micro, "scaling.batch_size per replica, one forward/backward at a time")
        plan.decide("batch.per_replica", micro * accumulate, f"{accumulate} micro-batches of {micro} per step")
        plan.decide("batch.global", plan["batch.global"] * accumulate,
                    f"effective: {accumulate} accumulated micro-batches x {plan['batch.global']}")
        plan.decide("gradient_accumulation", accumulate,
                    "the replica step sums the micro-batches' gradients and applies once, under every strategy, "
                    "precision and XLA (Keras's own accumulator merges inside a cond under tf.distribute, keras#16633)")
        plan.decide("batch.drop_remainder", True, "gradient accumulation: every step needs whole micro-batches")
        return
    if replicas > 1:
        drop, why = True, "several replicas: every step gets full, equal per-replica batches"
    elif plan.get("xla"):
        drop, why = True, "XLA: a ragged last batch would trigger a recompile"
    else:
        drop, why = False, "one replica without XLA: the ragged last batch is trained on"
    plan.decide("batch.drop_remainder", drop, why)


def rule_learning_rate(cfg: Config, env: Environment, plan: Plan, violations: list) -> None:
    sc, opt = cfg.scaling, cfg.optimizer
    if not opt.learning_rate > 0 or sc.reference_batch < 1:
        return  # reported by the bounds table
    global_batch = plan.get("batch.global")
    if global_batch is None:
        return
    ratio = global_batch / sc.reference_batch
    if sc.lr_rule == LrRule.none:
        lr, reason = opt.learning_rate, "lr_rule=none: as requested"
    elif sc.lr_rule == LrRule.linear:
        lr = opt.learning_rate * ratio
        reason = f"lr_rule=linear: {opt.learning_rate:g} x {global_batch}/{sc.reference_batch}"
    else:
        lr = opt.learning_rate * math.sqrt(ratio)
        reason = f"lr_rule=sqrt: {opt.learning_rate:g} x sqrt({global_batch}/{sc.reference_batch})"
    plan.decide("lr", lr, reason)
    _warmup(cfg, plan, violations)


def _warmup(cfg: Config, plan: Plan, violations: list) -> None:
    sc = cfg.scaling
    if sc.warmup_epochs > 0 and sc.warmup_steps > 0:
        violations.append(
            Violation(
                "scaling.warmup_steps",
                sc.warmup_steps,
                f"0 when scaling.warmup_epochs is set ({sc.warmup_epochs:g}); set one of the two",
                "scaling.warmup_steps=0 (or scaling.warmup_epochs=0)",
            )
        )
    has_schedule = sc.warmup_epochs > 0 or sc.warmup_steps > 0 or cfg.optimizer.schedule != LrSchedule.constant
    if cfg.train.reduce_lr_on_plateau.enabled and has_schedule:
        violations.append(
            Violation(
                "train.reduce_lr_on_plateau.enabled",
                True,
                "false while a learning-rate schedule (warmup or cosine) drives the learning rate",
                "train.reduce_lr_on_plateau.enabled=false, or optimizer.schedule=constant with no warmup",
            )
        )


def rule_training(cfg: Config, env: Environment, plan: Plan, violations: list) -> None:
    tr = cfg.train
    if tr.steps_per_execution >= 1:
        plan.decide("steps_per_execution", tr.steps_per_execution, "steps run per tf.function call (in-graph loop)")
    if cfg.deterministic:
        plan.decide("determinism", True, "requested: op determinism on, seeded; slower kernels")
    collapse = (f"; stop after {tr.collapse_steps} consecutive skipped steps or steps at the minimum loss scale"
                if tr.collapse_steps > 0 else "; train.collapse_steps=0: skipped steps never stop the run")
    if tr.on_nonfinite == OnNonfinite.stop:
        plan.decide("numerics.on_nonfinite", "stop", "a NaN/inf loss stops the run at that step, with a diagnosis"
                    + collapse)
    else:
        plan.decide("numerics.on_nonfinite", "skip", "a NaN/inf step is skipped by the loss-scale optimizer"
                    + collapse)
    layers = list(cfg.precision.float32_layers)
    if layers and plan.get("precision.policy", "float32") == "float32":
        plan.warn(f"precision.float32_layers={layers} is unused with a float32 policy: every layer is float32.")
    elif layers:
        plan.decide("precision.float32_layers", layers,
                    "requested: these layers compute in float32 (float32 range), the rest in the mixed policy")


def rule_big_batch(cfg: Config, env: Environment, plan: Plan, violations: list) -> None:
    """Clipping and the weights' moving average, as the launcher applies them (not as Keras would)."""
    opt = cfg.optimizer
    where = ("after the all-reduce, on the unscaled gradient of the global batch (Keras would clip each of the "
             f"{plan.get('replicas', 1)} replicas' partial gradients before summing them)"
             if plan.get("replicas", 1) > 1 else "on the unscaled gradient, after the (one-replica) reduction")
    if opt.clipnorm > 0:
        plan.decide("optimizer.clipnorm", opt.clipnorm, f"each variable's gradient clipped to this L2 norm {where}")
    if opt.global_clipnorm > 0:
        plan.decide("optimizer.global_clipnorm", opt.global_clipnorm, f"the whole gradient clipped to this L2 "
                                                                      f"norm {where}")
    if opt.use_ema:
        plan.decide("optimizer.use_ema", opt.ema_momentum,
                    "the weights' moving average (this momentum per step) is what validation, the best model and the "
                    "exported model use; checkpoints keep both, so a resume continues both")


def rule_task(cfg: Config, env: Environment, plan: Plan, violations: list) -> None:
    """The task decides the loss, the metrics and the head; names that cannot work for it are refused."""
    task = cfg.task.name.value
    spec = TASKS[task]
    plan.decide("task", task, f"task={task}: labels are {spec.labels}")
    plan.decide("task.head", spec.head, f"the {task} task's output layer" if _builtin_model(cfg)
                else "your model's output must match it (checked when it is built)")
    loss = loss_name(task, cfg.task.loss)
    mixed = plan.get("precision.policy", "float32") != "float32"
    in_float32 = "; computed in float32 on the float32 outputs" if mixed else ""
    if is_import_path(loss):
        plan.decide("task.loss", loss, "yours (imported when the model is built); its inputs are cast to float32"
                    + (" so it never computes in float16" if mixed else ""))
    elif loss in spec.losses:
        plan.decide("task.loss", loss, ("requested" if cfg.task.loss not in ("", "auto") else f"the {task} task's loss")
                    + (", padding tokens masked" if task == "sequence" else "") + in_float32)
    else:
        violations.append(Violation("task.loss", cfg.task.loss, f"one of {list(spec.losses)} for task={task}, or "
                                    "your own as module.path:function", f"task.loss={spec.losses[0]}"))
    metrics = metric_names(task, cfg.task.metrics)
    wrong = [m for m in metrics if not is_import_path(m) and m in ALL_METRICS and m not in spec.metrics]
    kept = ",".join(m for m in metrics if m not in wrong) or spec.metrics[0]
    for name in wrong:
        violations.append(Violation("task.metrics", name, f"a metric that means something for task={task}: one of "
                                    f"{list(spec.metrics)}, any keras.metrics name, or module.path:Class",
                                    f"task.metrics=[{kept}]"))
    if "loss" in metrics:
        violations.append(Violation("task.metrics", "loss", "metric names other than loss (the loss is always logged)",
                                    "drop loss from task.metrics"))
    plan.decide("task.metrics", metrics, "requested" if cfg.task.metrics else f"the {task} task's defaults; "
                "Keras metric objects summed over replicas and workers, then reduced (never a mean of means)")
    if task == "sequence" and cfg.model.name in ("mlp", "cnn", "resnet"):
        violations.append(Violation("model", cfg.model.name, "a model that predicts a token per position for "
                                    "task=sequence: model=transformer (causal) or your own", "model=transformer"))
    _check_monitors(cfg, task, metrics, plan, violations)


def _builtin_model(cfg: Config) -> bool:
    return cfg.model.name in ("mlp", "cnn", "resnet", "transformer")


def _check_monitors(cfg: Config, task: str, metrics: list[str], plan: Plan, violations: list) -> None:
    """Every metric named as a monitor or objective must be one the run logs (when their names are known)."""
    target = objective(cfg)
    plan.decide("objective", target, "requested" if cfg.objective != "auto" else f"objective=auto: the {task} "
                "task's headline validation metric (what a sweep job reports)")
    known = known_epoch_metrics(task, metrics)
    if known is not None:  # else a user metric: its name is known once it is built (the launch checks then)
        violations.extend(monitor_problems(cfg, task, known))


def rule_profile(cfg: Config, env: Environment, plan: Plan, violations: list) -> None:
    profile = cfg.train.profile
    if profile.steps > 0 and profile.skip_steps >= 0:
        chief = "" if plan.is_chief else " (chief only: this worker does not trace)"
        plan.decide(
            "profile",
            f"steps {profile.skip_steps + 1}-{profile.skip_steps + profile.steps}",
            "requested: TensorFlow profiler trace + op table in <run dir>/profile, logged to MLflow; "
            f"the window is rounded to step-execution boundaries{chief}",
        )


def rule_bounds(cfg: Config, env: Environment, plan: Plan, violations: list) -> None:
    """The plain range checks of `launcher.config.bounds`, reported with the rules' findings."""
    violations.extend(out_of_bounds(cfg))


RULES: tuple[Rule, ...] = (
    rule_precision,
    rule_strategy,
    rule_xla,
    rule_step,
    rule_loss_scale,
    rule_batch,
    rule_learning_rate,
    rule_training,
    rule_big_batch,
    rule_task,
    rule_profile,
    rule_bounds,
)
