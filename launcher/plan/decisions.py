"""The Plan: every decision the launcher made, each with its reason, in typed frozen sections.

A section is a frozen dataclass of decided values; each field carries the key it has in plan.yaml,
the `plan.*` MLflow tags and the `derived.*` params, and every decided value must come with a reason
(checked when the section is made). Rules return sections; consumers read attributes. What is decided
after resolution (the schedule, the data sharding, the output wrap, the resume point) is a record its
owner adds with `Plan.with_record`, which returns a new Plan: nothing mutates a Plan.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from typing import Any

import yaml

from launcher.config.precisions import PRECISIONS
from launcher.plan.reasons import CUT, one_line
from launcher.plan.section import PlanError, Reasons, S, Section, decision  # noqa: F401  (imported from here too)

# ----------------------------------------------------------------- sections decided by the resolver


@dataclass(frozen=True, kw_only=True)
class PrecisionPlan(Section):
    """The dtype policy and what keeps float32 where a mixed policy needs its range."""

    name: str = decision("precision")
    policy: str = decision("precision.policy")
    compute_dtype: str = decision("precision.compute_dtype")
    output_dtype: str | None = decision("model.output_dtype", optional=True)
    float32_layers: list[str] | None = decision("precision.float32_layers", optional=True)

    @property
    def mixed(self) -> bool:
        """Computes below float32 (the output layer and the loss stay float32): the precision table says."""
        return PRECISIONS[self.name].mixed


@dataclass(frozen=True, kw_only=True)
class StrategyPlan(Section):
    """Which tf.distribute strategy, on which devices, with how many replicas."""

    kind: str = decision("strategy")
    local_workers: int | None = decision("strategy.local_workers", optional=True)
    devices: list[str] = decision("strategy.devices")
    logical_cpus: int = decision("strategy.logical_cpus")
    replicas: int = decision("replicas")
    slurm_requeue: str | None = decision("strategy.slurm_requeue", optional=True)

    @property
    def requeues(self) -> bool:
        """SIGUSR1 saves and requeues this Slurm job (strategy.slurm_requeue under Slurm)."""
        return self.slurm_requeue is not None and self.slurm_requeue != "off"


@dataclass(frozen=True, kw_only=True)
class ClusterPlan(Section):
    """A multi-worker job: the workers, this process's place among them, how they talk."""

    workers: list[str] = decision("strategy.cluster")
    task_index: int = decision("strategy.task_index")
    is_chief: bool = decision("process.is_chief")
    communication: str = decision("strategy.communication")
    connect_timeout: float = decision("strategy.connect_timeout")


@dataclass(frozen=True, kw_only=True)
class StepPlan(Section):
    """How one training step runs: where XLA compiles, how the update is applied, steps per call."""

    xla: bool = decision("xla")
    update: str = decision("optimizer.update")
    kind: str = decision("step")
    steps_per_execution: int = decision("steps_per_execution")


@dataclass(frozen=True, kw_only=True)
class OptimizerPlan(Section):
    """Which optimizer applies the update and which schedule drives its learning rate (its arguments are decided
    with the data's size: `SchedulePlan.lr_schedule_arguments`)."""

    optimizer: str = decision("optimizer")
    schedule: str = decision("lr.schedule")


@dataclass(frozen=True, kw_only=True)
class LossScalePlan(Section):
    """Loss scaling and the optimizer wrapper that applies it."""

    mode: str = decision("loss_scale.mode")
    value: float | None = decision("loss_scale.value", optional=True)
    optimizer: str = decision("loss_scale.optimizer")


@dataclass(frozen=True, kw_only=True)
class BatchPlan(Section):
    """Global, per-replica and micro batches, accumulation and the ragged last batch."""

    global_batch: int = decision("batch.global")
    per_replica: int = decision("batch.per_replica")
    micro: int | None = decision("batch.micro", optional=True)
    accumulation: int = decision("gradient_accumulation")
    drop_remainder: bool = decision("batch.drop_remainder")


@dataclass(frozen=True, kw_only=True)
class LearningRatePlan(Section):
    """The peak learning rate after the batch scaling rule."""

    peak: float = decision("lr")


@dataclass(frozen=True, kw_only=True)
class NumericsPlan(Section):
    """What happens to non-finite steps, determinism, clipping and the weights' moving average."""

    on_nonfinite: str = decision("numerics.on_nonfinite")
    determinism: bool | None = decision("determinism", optional=True)
    clipnorm: float | None = decision("optimizer.clipnorm", optional=True)
    global_clipnorm: float | None = decision("optimizer.global_clipnorm", optional=True)
    ema_momentum: float | None = decision("optimizer.use_ema", optional=True)


@dataclass(frozen=True, kw_only=True)
class TaskPlan(Section):
    """The task's head, loss, metrics, the objective a sweep reports and what the best model is kept by."""

    name: str = decision("task")
    head: str = decision("task.head")
    loss: str = decision("task.loss")
    metrics: list[str] = decision("task.metrics")
    objective: str = decision("objective")
    # checkpoint.monitor: the metric best.keras and the best/ checkpoint are kept by, and its direction (min, max).
    best_by: str | None = decision("checkpoint.monitor", optional=True)
    best_mode: str | None = decision("checkpoint.mode", optional=True)
    # task.class_weight of a one-head classification task: "balanced" or {class id: weight}.
    class_weight: str | dict | None = decision("task.class_weight", optional=True)
    # task.heads: output name -> {task, loss, loss_weight, metrics, class_weight}, in the config's order.
    heads: dict[str, dict] | None = decision("task.heads", optional=True)
    # The keyword arguments from config of a one-head task's loss and metrics: {"loss": {...}, "metrics": {name:
    # {...}}}; None when none has any (under task.heads each head's are its `arguments`).
    arguments: dict | None = decision("task.arguments", optional=True)


@dataclass(frozen=True, kw_only=True)
class ExportPlan(Section):
    """What the trained model is exported as (nothing when checkpoint.export_model=false)."""

    formats: list[str] = decision("export.formats")


@dataclass(frozen=True, kw_only=True)
class ProfilePlan(Section):
    """The profiler's trace window, when one is asked for."""

    window: str | None = decision("profile", optional=True)


@dataclass(frozen=True, kw_only=True)
class LayerSwapsPlan(Section):
    """Whether the build swaps stock Keras layers for fused kernels that compute the same (which ones: the build's
    `SwappedLayersPlan`)."""

    mode: str = decision("model.layer_swaps")

    @property
    def on(self) -> bool:
        return self.mode == "auto"


# ----------------------------------------------------------------- records added after resolution


@dataclass(frozen=True, kw_only=True)
class SchedulePlan(Section):
    """What depends on the data's size (added by `launcher.plan.schedule` once the data is loaded)."""

    steps_per_epoch: int = decision("train.steps_per_epoch")
    validation_steps: int = decision("train.validation_steps")
    total_steps: int = decision("train.total_steps")
    epochs: int = decision("train.epochs")  # the last one partial when train.max_steps ends it
    warmup_steps: int = decision("warmup.steps")
    # The schedule's keyword arguments, the launcher's filled in (None: a constant rate).
    lr_schedule_arguments: dict | None = decision("lr.schedule_arguments", optional=True)
    max_time_seconds: float | None = decision("train.max_time", optional=True)
    max_steps: int | None = decision("train.max_steps", optional=True)  # set when it ends training early
    test_steps: int | None = decision("train.test_at_end", optional=True)  # set when the run tests at its end
    unfreeze_step: int | None = decision("train.unfreeze_at_epoch", optional=True)  # global step of the unfreeze
    val_every_steps: int | None = decision("train.val_every_steps", optional=True)  # validations inside epochs
    unfreeze_lr_factor: float | None = decision("train.unfreeze_learning_rate", optional=True)
    unfreeze_fresh_optimizer: bool | None = decision("train.unfreeze_fresh_optimizer", optional=True)

    def steps_in_epoch(self, position) -> int:
        """Steps the epoch `position` is in trains: all of them, but only up to global step max_steps when
        train.max_steps ends training (the last epoch is partial). From the position, so a later launch with a
        larger max_steps after a partial epoch still stops at exactly that global step."""
        if self.max_steps is None:
            return self.steps_per_epoch
        started_at = position.global_step - position.step_in_epoch
        return max(0, min(self.steps_per_epoch, self.max_steps - started_at))

    def reached_max_steps(self, position) -> bool:
        return self.max_steps is not None and position.global_step >= self.max_steps


@dataclass(frozen=True, kw_only=True)
class DataPlan(Section):
    """How training data is read and split across workers (added by `launcher.plan.sharding`)."""

    resume: str | None = decision("data.resume", optional=True)
    sharding: str | None = decision("data.sharding", optional=True)


@dataclass(frozen=True, kw_only=True)
class OutputPlan(Section):
    """What the built model's output turned out to need (added by the build); per output when it has several."""

    dtype: str = decision("model.output_dtype")
    # A model with several outputs: each one's name -> its dtype as built and what was done ("bfloat16 -> float32
    # (wrapped)", "float32 (kept)"). None for one output: its record is `dtype` alone.
    heads: dict[str, str] | None = decision("model.output_heads", optional=True)
    # The class weights the loss uses, per head ("task" for a one-head task): balanced ones computed from the
    # training labels, mappings as a weight per class id. None when no head has class weights.
    class_weights: dict[str, list[float]] | None = decision("task.class_weights", optional=True)
    # What the outputs are (task.outputs): "probabilities (its last layer is a softmax)", "logits (declared)"...,
    # per head with several; None for logits outputs nobody declared (what the launcher always assumed).
    given: str | dict[str, str] | None = decision("task.outputs", optional=True)


@dataclass(frozen=True, kw_only=True)
class SwappedLayersPlan(Section):
    """Which layers the build swapped for fused kernels and which it kept, each by its path with why (added by the
    build when the model has a layer it could swap and model.layer_swaps=auto)."""

    swapped: dict[str, str] = decision("model.swapped_layers")
    kept: dict[str, str] | None = decision("model.kept_layers", optional=True)


@dataclass(frozen=True, kw_only=True)
class InitPlan(Section):
    """Where the first weights came from (model.init_from; added by the build)."""

    source: str = decision("init.source")
    loaded: list[str] = decision("init.loaded")
    skipped: list[str] | None = decision("init.skipped", optional=True)


@dataclass(frozen=True, kw_only=True)
class FreezePlan(Section):
    """What model.freeze froze in the built model, and what still trains (added by the build)."""

    frozen: list[str] = decision("model.frozen")
    trainable_parameters: int = decision("model.trainable_parameters")
    frozen_parameters: int = decision("model.frozen_parameters")


@dataclass(frozen=True, kw_only=True)
class InputsPlan(Section):
    """What prepares the model's inputs (the build): model.adapt's layers by name, what side scales image pixels."""

    adapted: dict[str, str] | None = decision("model.adapted", optional=True)
    pixels: str | None = decision("data.pixels", optional=True)


@dataclass(frozen=True, kw_only=True)
class ResumePlan(Section):
    """Where a resumed run continues (added when a checkpoint is restored)."""

    position: str = decision("resume")


@dataclass(frozen=True, kw_only=True)
class ContinuationPlan(Section):
    """A run continued by this launch: the `auto` choices its first launch made, kept, and the settings changed
    since, applied (added at launch when the run dir holds an earlier launch and a checkpoint to resume)."""

    kept: str | None = decision("resume.kept", optional=True)
    changed: str | None = decision("resume.changed", optional=True)


@dataclass(frozen=True, kw_only=True)
class TunePlan(Section):
    """How tune=auto chose the step: the candidates timed (or the cached table), or why it did not tune."""

    tune: str = decision("tune")


@dataclass(frozen=True, kw_only=True)
class TrialPlan(Section):
    """This run is one trial of an hparams_search study (added at launch, from the study's stored settings)."""

    trial: str = decision("sweep.trial")
    reports: str = decision("sweep.reports")


@dataclass(frozen=True, kw_only=True)
class FaultPlan(Section):
    """A test's injected fault, armed in this process (added at launch; never outside tests)."""

    armed: str = decision("fault")


# ------------------------------------------------------------------------------------------ the Plan


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Every decision of one launch: the resolver's sections, then the records added after it."""

    precision: PrecisionPlan
    strategy: StrategyPlan
    cluster: ClusterPlan | None
    step: StepPlan
    optimizer: OptimizerPlan
    loss_scale: LossScalePlan
    batch: BatchPlan
    learning_rate: LearningRatePlan
    numerics: NumericsPlan
    task: TaskPlan
    export: ExportPlan
    profile: ProfilePlan
    layer_swaps: LayerSwapsPlan | None = None  # None: a Plan made without the rule (swaps off)
    warnings: tuple[str, ...] = ()
    records: tuple[Section, ...] = ()

    # --------------------------------------------------------------- records

    def with_record(self, record: Section) -> Plan:
        """A new Plan with `record` added (replacing an earlier record of the same kind)."""
        kept = tuple(r for r in self.records if type(r) is not type(record))
        return replace(self, records=(*kept, record))

    def with_warning(self, message: str) -> Plan:
        return replace(self, warnings=(*self.warnings, message))

    def record(self, kind: type[S]) -> S:
        """The record of this kind; PlanError when its owner has not added it yet."""
        for record in self.records:
            if isinstance(record, kind):
                return record
        raise PlanError(f"{kind.__name__} is not decided yet: {kind.__doc__}")

    def has(self, kind: type[Section]) -> bool:
        return any(isinstance(r, kind) for r in self.records)

    @property
    def schedule(self) -> SchedulePlan:
        return self.record(SchedulePlan)

    @property
    def is_chief(self) -> bool:
        """This process tracks and exports (one process, or the chief of a multi-worker job)."""
        return self.cluster is None or self.cluster.is_chief

    @property
    def worker_index(self) -> int:
        """This process's index among the workers (0 when it trains alone)."""
        return 0 if self.cluster is None else self.cluster.task_index

    @property
    def file_sharded(self) -> bool:
        """Each worker reads its own training files (`launcher.plan.sharding` decided so)."""
        return self.has(DataPlan) and self.record(DataPlan).sharding == "file"

    # ------------------------------------------------------------ as written

    def sections(self) -> Iterator[Section]:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Section):
                yield value
        yield from self.records

    def decisions(self) -> dict[str, tuple[Any, str]]:
        """plan.yaml key -> (value, reason), in order; a later record overrides an earlier key."""
        out: dict[str, tuple[Any, str]] = {}
        for section in self.sections():
            for key, value, reason in section.decisions():
                out[key] = (value, reason)
        return out

    def values(self) -> dict[str, Any]:
        return {key: value for key, (value, _) in self.decisions().items()}

    def to_dict(self) -> dict:
        decided = {key: {"value": _plain(value), "reason": reason} for key, (value, reason) in self.decisions().items()}
        return {"decisions": decided, "warnings": list(self.warnings)}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, width=100)

    def tags(self) -> dict[str, str]:
        """One MLflow tag per decision (values only; reasons live in plan.yaml)."""
        return {f"plan.{key}": str(_plain(value)) for key, value in self.values().items()}

    def render(self, whole: bool = False) -> str:
        """The Plan on the console: one line per decision, its reason cut to fit (plan.yaml keeps it whole); `whole`
        (explain) cuts nothing."""
        decided = self.decisions()
        width = max((len(k) for k in decided), default=0)
        lines = ["Plan:"]
        for key, (value, why) in decided.items():
            lines.append(one_line(f"  {key:<{width}}  ", _plain(value), why, 14, whole))
        if any(line.endswith(CUT) for line in lines):
            lines.append(f"  ({CUT} the whole reason is in the run dir's plan.yaml)")
        if self.warnings:
            lines.append("Warnings:")
            lines.extend(f"  ! {w}" for w in self.warnings)
        return "\n".join(lines)


def render_changes(before: Plan, after: Plan, heading: str) -> str:
    """The console lines of the decisions `after` changed from `before` (the Plan decided again), under `heading`."""
    was, now = before.decisions(), after.decisions()
    changed = {key: decided for key, decided in now.items() if key not in was or was[key][0] != decided[0]}
    width = max((len(k) for k in changed), default=0)
    lines = [heading]
    for key, (value, why) in changed.items():
        lines.append(one_line(f"  {key:<{width}}  ", _plain(value), why, 14))
    return "\n".join(lines)


def render_records(records: list[Section], decided_by: str) -> str:
    """The console lines of records added after the Plan was printed, under a heading of their own (they would
    otherwise read as part of the Plan's `Warnings:`)."""
    lines = [f"Plan, decided by {decided_by}:"]
    for record in records:
        lines += [one_line(f"  {key:<23} ", _plain(value), reason) for key, value, reason in record.decisions()]
    return "\n".join(lines)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.6g}")
    return value
