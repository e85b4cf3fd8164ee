"""Structured-config schema: every key a person can set, with its type.

Closed choices are Enums, so a typo fails when Hydra composes the config and
the message names the full key and the valid values. YAML files in `conf/`
extend these schemas (see `register_configs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

from launcher.config.bounds import limited
from launcher.config.datasets import (  # noqa: F401 (the dataset schemas' import path, as plugins write it, stays)
    DATASET_KINDS,
    CustomDatasetConfig,
    DatasetBase,
    DigitsConfig,
    ImageFolderConfig,
    NpzConfig,
    SyntheticConfig,
    SyntheticKind,
    TfrecordConfig,
)
from launcher.config.errors import ConfigError, raise_if_any
from launcher.config.imports import plugins
from launcher.config.keys import unknown_key_problems
from launcher.config.models import MODEL_KINDS, CustomModelConfig
from launcher.config.precisions import PRECISIONS
from launcher.config.strategies import STRATEGIES
from launcher.config.tasks import TASKS

# The precision table's names, and auto (the resolver picks by the hardware).
PrecisionName = Enum("PrecisionName", {**{name: name for name in PRECISIONS}, "auto": "auto"})
# The strategy table's names.
StrategyKind = Enum("StrategyKind", {name: name for name in STRATEGIES})


class Communication(Enum):
    auto = "auto"
    ring = "ring"
    nccl = "nccl"


class LossScaleMode(Enum):
    auto = "auto"
    dynamic = "dynamic"
    fixed = "fixed"
    none = "none"


class LossScaleImpl(Enum):
    auto = "auto"
    stock = "stock"
    replica_safe = "replica_safe"


# `global` is a keyword, hence the functional form.
BatchRule = Enum("BatchRule", {"per_replica": "per_replica", "global": "global"})


class LrRule(Enum):
    none = "none"
    linear = "linear"
    sqrt = "sqrt"


class OptimizerUpdate(Enum):
    auto = "auto"
    keras = "keras"
    fused = "fused"


class Unreachable(Enum):
    """What a launch does when its tracking server does not answer at start."""

    fail = "fail"
    local = "local"


class OnNonfinite(Enum):
    """What a training step with a NaN/inf loss does."""

    stop = "stop"
    skip = "skip"


class Mode(Enum):
    """What a launch does with the config."""

    train = "train"
    doctor = "doctor"
    eval = "eval"
    predict = "predict"


# What the model learns (decides the loss, the metrics and the output head): the task table's names.
TaskName = Enum("TaskName", {name: name for name in TASKS})


class TaskOutputs(Enum):
    auto = "auto"
    logits = "logits"
    probabilities = "probabilities"


class EvalSplit(Enum):
    train = "train"
    val = "val"
    test = "test"


class MonitorMode(Enum):
    min = "min"
    max = "max"
    auto = "auto"  # by the metric's name: losses, errors and perplexity go down, the rest up


# ---------------------------------------------------------------- the how


@dataclass
class PrecisionConfig:
    name: PrecisionName = PrecisionName.fp32
    """fp32, mixed (float16 compute), bf16 (bfloat16 compute) or auto (the resolver picks)."""
    float32_layers: list[str] = field(default_factory=list)
    """Layers (by name) kept in float32 under a mixed or bf16 policy, e.g. one whose activations
    overflow float16; `mode=doctor` finds them. Names are checked against the built model."""


@dataclass
class HeadConfig:
    """One model output's task (`task.heads.<output name>`): what a one-head task holds, plus its weights."""

    name: TaskName = TaskName.classification
    """classification, multilabel, regression or sequence: this output's labels, loss and metrics."""
    loss: Any = "auto"
    """auto (the head's task's), a built-in loss of that task, or your own as module.path:name or an installed
    plugin's name (launcher.losses); in float32. With arguments: {name: ..., <argument>: value, ...}."""
    metrics: list[Any] = field(default_factory=list)
    """This head's metrics as task.metrics takes them ([] = its task's defaults, [none] = none), logged as
    <head>_<metric> and val_<head>_<metric>."""
    outputs: TaskOutputs = TaskOutputs.auto
    """What this output is, as task.outputs: auto (read from its last layer), logits or probabilities."""
    loss_weight: float = limited(1.0, ">= 0")
    """This head's share of the total loss: loss = sum over heads of loss_weight * head loss, a number >= 0."""
    class_weight: Any = None
    """Classification heads: balanced (n / (classes * count) from the training labels) or {class id: weight >= 0};
    null = every class weighs 1. Weighs the training loss and metrics, as Keras's fit(class_weight=) does."""


@dataclass
class TaskConfig:
    name: TaskName = TaskName.classification
    """classification (softmax over classes), multilabel (a sigmoid per label), regression (real targets) or
    sequence (next-token language modelling on token data, padding masked)."""
    loss: Any = "auto"
    """auto (the task's), crossentropy, binary_crossentropy, mse, mae, huber, or your own as module.path:name or an
    installed plugin's name (launcher.losses): a function (y_true, y_pred) -> per-example loss, or a keras Loss
    class; always computed in float32. With arguments: {name: ..., <argument>: value, ...} (name: any of these)."""
    metrics: list[Any] = field(default_factory=list)
    """Metric names (accuracy, auc, precision, recall, mae, mse, rmse, perplexity, any name keras.metrics knows)
    or your own keras Metric class as module.path:Name or an installed plugin's name (launcher.metrics), each
    either a name or {name: ..., <argument>: value} (e.g. {name: auc, curve: PR}); [] = the task's defaults,
    [none] = no metric beside the loss."""
    outputs: TaskOutputs = TaskOutputs.auto
    """What the model's output is: auto (probabilities when its last layer is a softmax or sigmoid, else logits),
    logits or probabilities; the loss and metrics get it as plain Keras fit gives them, the server answers
    probabilities either way."""
    pad_id: int = 0
    """sequence: the token id that pads sequences (masked out of the loss and metrics)."""
    class_weight: Any = None
    """task=classification with one output: balanced (n / (classes * count) from the training labels) or
    {class id: weight >= 0}; null = every class weighs 1. Weighs the training loss and metrics as Keras does."""
    heads: dict[str, HeadConfig] = field(default_factory=dict)
    """A task per model output, by output name (the model's output names, the keys of a dict y); {} = one
    output, whose task is the keys above. With heads, name/loss/metrics/class_weight above are not used."""


@dataclass
class EvalConfig:
    run: str = ""
    """The training run to evaluate / predict with: a run dir, a run name (outputs/runs/<name>) or an MLflow
    run id; "" = the newest run under outputs/runs."""
    model: str = "final"
    """final (model.keras), best (best.keras) or a path to a .keras file or a ckpt-N checkpoint prefix."""
    split: EvalSplit = EvalSplit.val
    """The dataset split evaluated or predicted: train, val or test (needs a test split: dataset.test_split...)."""
    output: str = "predictions.npz"
    """predict: the file the predictions are written to, .npz, .csv or .parquet (with eval.input .parquet is the
    default: predictions.npz left as is writes predictions.parquet); in the predict's run dir (<run read>/predict/
    <time>) unless given on the command line: then a path from where the command runs, to a file not there yet."""
    input: str = ""
    """predict: a file or folder to predict instead of a split, streamed through the run's SavedModel: a .csv or
    .parquet table of features, a folder of images or TFRecord files; "" = the split (eval.split)."""
    ids: str = ""
    """predict with eval.input: the table's column holding each row's id, written beside its predictions;
    "" = the row number (images are named by file, TFRecord records by index)."""


@dataclass
class StrategyConfig:
    kind: StrategyKind = StrategyKind.default
    """default, one_device, mirrored (one machine, several devices) or multi_worker."""
    devices: int = limited(0, ">= 0")
    """mirrored: replicas wanted, >= 0 (0 = every GPU; without GPUs, 2 logical CPU devices)."""
    device: str = "auto"
    """one_device: "auto" (first GPU, else CPU) or a device string such as /cpu:0 or /gpu:1."""
    local_workers: int = limited(0, ">= 0", fix=2)
    """multi_worker: start this many worker processes on this machine (127.0.0.1, free ports), >= 0
    (0 = this process is one worker of a cluster named by workers, TF_CONFIG or Slurm)."""
    workers: list[str] = field(default_factory=list)
    """multi_worker: every worker's host:port, the same list on every worker (chief first)."""
    task_index: int = limited(0, ">= 0")
    """multi_worker with `workers`: this worker's position in that list, 0 = the chief."""
    port: int = limited(12345, "[1, 65535]")
    """multi_worker under Slurm: task k of a node listens on port + k, in 1..65535."""
    communication: Communication = Communication.auto
    """multi_worker collectives: auto (ring on CPU, NCCL on GPUs), ring or nccl (GPUs only)."""
    connect_timeout: float = limited(300.0, "> 0")
    """multi_worker: seconds to wait for every peer at start-up before stopping with their addresses, > 0."""
    slurm_requeue: bool = False
    """Under Slurm: SIGUSR1 (sbatch --signal=USR1@<seconds before the time limit>) saves a checkpoint and
    requeues the job (scontrol requeue), which resumes from it when it starts again (give the run a name=)."""


@dataclass
class LossScaleConfig:
    mode: LossScaleMode = LossScaleMode.auto
    """auto (dynamic under float16, else none), dynamic, fixed or none."""
    implementation: LossScaleImpl = LossScaleImpl.auto
    """auto (the resolver picks), stock (Keras's) or replica_safe (ours)."""
    initial_scale: float = limited(32768.0, "> 0")
    """dynamic: starting scale, in [min_scale, max_scale]."""
    growth_interval: int = limited(2000, ">= 1")
    """dynamic: finite steps after which the scale doubles, >= 1."""
    min_scale: float = limited(1.0, "> 0")
    """dynamic: the scale never halves below this, > 0."""
    max_scale: float = 16777216.0
    """dynamic: the scale never doubles above this, >= initial_scale."""
    value: float = limited(1024.0, "> 0")
    """fixed: the constant scale, > 0 (a power of 2 keeps gradients exact)."""


@dataclass
class ScalingConfig:
    batch_rule: BatchRule = BatchRule["per_replica"]  # type: ignore[valid-type]
    """per_replica (batch_size per replica) or global (batch_size split over replicas)."""
    batch_size: int = limited(64, ">= 1")
    """Examples per step, per replica or global by batch_rule, >= 1."""
    lr_rule: LrRule = LrRule.none
    """How the learning rate follows the global batch: none, linear or sqrt."""
    reference_batch: int = limited(64, ">= 1")
    """The global batch optimizer.learning_rate was tuned for, >= 1."""
    warmup_epochs: float = limited(0.0, ">= 0")
    """Linear warmup length in epochs, >= 0 (exclusive with warmup_steps)."""
    warmup_steps: int = limited(0, ">= 0")
    """Linear warmup length in global steps, >= 0 (exclusive with warmup_epochs)."""


@dataclass
class OptimizerConfig:
    name: str = "adam"
    """Keras's: adam, adamw, sgd, rmsprop, nadam, adamax, adagrad, adadelta, adafactor, ftrl, lion, lamb; or
    yours as module.path:Name (a keras.optimizers.Optimizer subclass)."""
    params: dict[str, Any] = field(default_factory=dict)
    """More keyword arguments for the optimizer, e.g. optimizer.params='{beta_1: 0.95}' (checked against its
    signature; the rate, clipping, EMA, weight decay and accumulation have their own keys)."""
    learning_rate: float = limited(1e-3, "> 0")
    """Peak learning rate at reference_batch, > 0 (scaled by scaling.lr_rule)."""
    schedule: str = "constant"
    """After warmup: constant, cosine (to 0 at the last step), cosine_restarts, exponential, inverse_time,
    polynomial, piecewise (Keras's schedules) or yours as module.path:Name; see schedule_params."""
    schedule_params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the schedule, e.g. {decay_rate: 0.5} (exponential). The launcher fills
    initial_learning_rate (the planned rate), decay_steps (the steps after warmup) and cosine_restarts'
    first_decay_steps (one epoch) unless given here."""
    momentum: float = limited(0.9, "[0, 1)")
    """sgd: momentum, in [0, 1) (other optimizers: optimizer.params)."""
    weight_decay: float = limited(0.0, ">= 0")
    """Decoupled weight decay, >= 0 (0 = the optimizer's default: 0.004 for adamw, none for the others)."""
    clipnorm: float = limited(0.0, ">= 0")
    """Clip each variable's gradient to this L2 norm, >= 0 (0 = no clipping); after the all-reduce."""
    global_clipnorm: float = limited(0.0, ">= 0")
    """Clip the whole gradient to this global L2 norm, >= 0 (0 = off); after the all-reduce (Keras clips
    each replica's part before it)."""
    use_ema: bool = False
    """Keep an exponential moving average of the weights; validation, best model and export use it."""
    ema_momentum: float = limited(0.99, "[0, 1)")
    """use_ema: weight of the average's previous value per step, in [0, 1)."""
    gradient_accumulation_steps: int = limited(1, ">= 1")
    """Micro-batches per step, >= 1: each step sums the gradients of this many micro-batches of
    scaling.batch_size and applies once (the effective batch is this many times larger; LR rules use it)."""
    update: OptimizerUpdate = OptimizerUpdate.auto
    """How the update is applied: fused (TensorFlow's one-kernel-per-variable apply ops), keras
    (Keras's elementwise ops) or auto (fused unless XLA already compiles the update)."""


@dataclass
class EarlyStoppingConfig:
    enabled: bool = False
    """Stop when `monitor` has not improved for `patience` epochs."""
    monitor: str = "val_loss"
    """An epoch metric name, e.g. val_loss or val_accuracy."""
    patience: int = limited(3, ">= 0")
    """Epochs without improvement before stopping, >= 0."""
    mode: MonitorMode = MonitorMode.min
    """min (lower is better), max or auto (Keras decides by the metric)."""


@dataclass
class ReduceLrConfig:
    enabled: bool = False
    """Multiply the learning rate by `factor` when `monitor` plateaus (constant schedules only)."""
    monitor: str = "val_loss"
    """An epoch metric name."""
    factor: float = limited(0.5, "(0, 1)")
    """Multiplier applied on a plateau, in (0, 1)."""
    patience: int = limited(2, ">= 0")
    """Epochs without improvement before reducing, >= 0."""
    mode: MonitorMode = MonitorMode.min
    """min (lower is better), max or auto (Keras decides by the metric)."""


@dataclass
class ProfileConfig:
    steps: int = limited(0, ">= 0", fix=10)
    """Training steps to trace with TensorFlow's profiler, >= 0 (0 = off); to <run dir>/profile."""
    skip_steps: int = limited(10, ">= 0")
    """Steps to skip before tracing (past tracing and compilation), >= 0."""


@dataclass
class TrainConfig:
    epochs: int = limited(5, ">= 1")
    """Epochs to train, >= 1 (a resumed run trains up to this epoch)."""
    steps_per_execution: int = limited(16, ">= 1")
    """Steps run inside one tf.function call (fewer Python round trips), >= 1."""
    max_steps_per_epoch: int = limited(0, ">= 0")
    """Cap on steps per epoch, >= 0 (0 = the whole training split)."""
    on_nonfinite: OnNonfinite = OnNonfinite.stop
    """A step whose loss is NaN/inf: stop (at once, naming the step, with a diagnosis) or skip (the step's
    update is skipped, as loss scaling skips overflowing gradients; under float32 the resolver adds a
    fixed-scale-1 loss-scale optimizer for that)."""
    telemetry: bool = True
    """Count per step on the device: the unscaled gradient norm, skipped steps, the loss and loss scale of
    every step (step/grad_norm, step/skipped_steps, the trace up to a numerics stop); false = the bare
    loop (the guard still stops on a NaN loss and on collapse_steps)."""
    collapse_steps: int = limited(20, ">= 0")
    """Stop with a diagnosis after this many consecutive skipped (non-finite) steps, or this many steps
    with the dynamic loss scale at its minimum, >= 0 (0 = never)."""
    measure_utilization: bool = True
    """Log model_flops_utilization per epoch (model FLOPs vs this machine's cached matmul peak)."""
    remeasure_matmul: bool = True
    """precision=auto, xla=auto: measure this machine's matmul rates again when the cached figure is due
    (provisional, or a week old; ~12 s in a child process). false: decide by the cached figure whatever its age,
    by the CPU's flags when there is none (debug=fast)."""
    max_validation_steps: int = limited(0, ">= 0")
    """Cap on validation steps per epoch, >= 0 (0 = every validation example)."""
    limit_fraction: float = limited(1.0, "(0, 1]")
    """Run this fraction of each epoch's training and validation steps, in (0, 1] (debug=limit)."""
    max_steps: int = limited(0, ">= 0")
    """Stop after this many global steps, >= 0 (0 = the epochs decide); the last epoch may be partial (it is
    validated, checkpointed and logged as an epoch)."""
    val_every_steps: int = limited(0, ">= 0")
    """Validate every this many global steps as well as at each epoch end, >= 0 (0 = epoch ends only): the best
    model, early stopping's and the LR plateau rule's patience count validations, and val_* are logged by global
    step."""
    max_time: str = ""
    """Training-time budget of one launch, counted from its first step (start-up, data and build not counted:
    leave them as margin under a scheduler's limit), e.g. 2h30m, 45m, 90s ("" = none): at the first step boundary
    past it the run saves, ends FINISHED with tag stop_reason=max_time and exits 0; the same command again
    continues with a new budget."""
    unfreeze_at_epoch: int = limited(0, ">= 0")
    """After this many epochs the layers in model.freeze train too, >= 0 (0 = never): the step is retraced, the
    optimizer keeps its state (its slots exist for every layer from the start), a resume lands in the right phase."""
    unfreeze_learning_rate: float = limited(0.0, ">= 0")
    """The learning rate from train.unfreeze_at_epoch on (the schedule scaled to it), >= 0 (0 = unchanged)."""
    unfreeze_batch_norm: bool = True
    """At train.unfreeze_at_epoch, BatchNormalization in the unfrozen layers trains too (true), or stays frozen in
    inference mode, its statistics kept, while the rest trains (false: keras.io's fine-tuning advice, which Keras 3's
    fit no longer follows for base(x, training=False), keras#20285)."""
    unfreeze_fresh_optimizer: bool = False
    """At train.unfreeze_at_epoch, the optimizer starts afresh (its slots and its step count zeroed, as keras.io's
    recompile with a new optimizer does; the learning-rate schedule goes on from the global step), or keeps the
    frozen phase's state (false)."""
    test_at_end: bool = False
    """After training, evaluate the best model (checkpoint.monitor's, else the final one) once on the test split
    and log test_* metrics; needs a test split (dataset.test_split, or the dataset's own test data)."""
    max_restarts: int = limited(0, ">= 0")
    """Restart a failed training this many times, >= 0, each in a fresh process from the newest checkpoint
    (a crash, a dead worker, a process killed by the OOM killer); never a refusal, a numerics stop, a full
    disk or a signal from you. 0 = fail as is."""
    restart_backoff: float = limited(10.0, ">= 0")
    """Seconds before the first restart, >= 0; doubled for each further one (at most 600)."""
    callbacks: list[str] = field(default_factory=list)
    """Your Keras callbacks as module.path:Name or an installed plugin's name (launcher.callbacks): a
    keras.callbacks.Callback class or a function returning one."""
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)
    reduce_lr_on_plateau: ReduceLrConfig = field(default_factory=ReduceLrConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)


@dataclass
class CheckpointConfig:
    enabled: bool = True
    """Save checkpoints into <run dir>/checkpoints and resume from them."""
    interval_epochs: int = limited(1, ">= 0")
    """Save at the end of every interval_epochs-th epoch, >= 0 (0 = never at epoch ends)."""
    interval_steps: int = limited(0, ">= 0")
    """Save at every multiple of this many global steps, >= 0 (0 = off)."""
    max_to_keep: int = limited(3, ">= 1", when="checkpoint.enabled")
    """Newest checkpoints kept on disk, >= 1 (older ones are deleted with their sidecars)."""
    resume: str = "auto"
    """auto (newest complete checkpoint), never (old ones moved aside) or a ckpt-N prefix path."""
    monitor: str = ""
    """Keep the best checkpoint (and best.keras) by this epoch metric, e.g. val_loss; auto = the run's objective
    (the default job's); "" = off."""
    mode: MonitorMode = MonitorMode.auto
    """min (lower is better), max, or auto (by the metric's name: losses, errors, perplexity go down), for
    `monitor`."""
    save_on_preemption: bool = True
    """SIGTERM / SIGINT: save at the next step boundary, mark the run KILLED, exit 128 + signal."""
    verify_restore: bool = True
    """After the first save, restore it into fresh objects and check every variable is consumed."""
    export_model: bool = True
    """Export the final (and best, when monitored) model as .keras and log it to MLflow."""
    directory: str = ""
    """Where checkpoints go; "" = <run dir>/checkpoints. Multi-worker: a path every worker can read
    (shared filesystem): the chief writes it, the others resume from it."""


@dataclass
class ExportConfig:
    formats: list[str] = field(default_factory=lambda: ["keras"])
    """What the final model is exported as, each into the run dir and MLflow: keras (model.keras, always: eval,
    predict and the MLflow model read it), saved_model (a TensorFlow SavedModel whose serving_default takes the
    raw input and returns the task's predictions), tflite (model.tflite, for models TFLite converts; one it
    cannot is reported, the run still finishes), or a format of your own: an export writer as module.path:Name or
    an installed plugin's name (launcher.exports). Needs checkpoint.export_model=true."""


@dataclass
class TrackingConfig:
    enabled: bool = True
    """Log the run to MLflow."""
    uri: str = "sqlite:///outputs/mlflow.db"
    """MLflow tracking URI: sqlite:///<path> (relative to the launch dir), a folder or http://."""
    experiment: str = "launcher"
    """MLflow experiment name (created when missing)."""
    run_name: str = ""
    """MLflow run name; "" = `name`, else model-dataset-precision-strategy."""
    parent_run_id: str = ""
    """Set by a sweep for its jobs: the sweep's parent MLflow run."""
    sweep_id: str = ""
    """Set by a sweep for its jobs: the sweep's id."""
    on_unreachable: Unreachable = Unreachable.fail
    """A tracking server that does not answer at start: fail (refuse the launch) or local (warn and
    log to fallback_uri instead)."""
    fallback_uri: str = "sqlite:///outputs/mlflow.db"
    """Where on_unreachable=local logs (relative to the launch dir)."""
    outage_wait: float = limited(120.0, ">= 0")
    """Seconds a finished launch waits for a tracking server that went away mid-run, >= 0; what is
    still undelivered then is kept in the run dir (python -m launcher.tracking.sync delivers it)."""
    step_metrics_every: int = limited(32, ">= 0", fix=10)
    """Log `step/loss`, `step/accuracy`, `step/learning_rate` and `step/loss_scale` every this many
    global steps (the mean over those steps), >= 0; 0 = epoch metrics only."""
    system_metrics: bool = True
    """Log MLflow's system metrics (CPU, memory, disk, network) while training."""
    system_metrics_interval: float = limited(10.0, "> 0")
    """Seconds between system metric samples, > 0."""
    tags: dict[str, str] = field(default_factory=dict)
    """Your own tags on the run, e.g. tracking.tags='{team: vision, ticket: ML-12}'."""
    register_model: str = ""
    """Register the logged MLflow model under this name in the model registry ("" = do not)."""
    log_model: bool = True
    """Log the final model as an MLflow model (signature, input example; loads with mlflow.pyfunc)."""
    tensorboard: bool = False
    """Also write the epoch and step/* scalars and the Plan as a TensorBoard event log in <run dir>/tensorboard,
    logged to the MLflow run as the `tensorboard` artifact."""


@dataclass
class SweepConfig:
    fail_fast: bool = False
    """A sweep stops at its first failed job: jobs not started are skipped, running ones save and stop (the same
    named sweep again continues them), the parent run is FAILED and names the job. false: the others carry on."""
    trial: int | None = None
    """Set by hparams_search for each of its jobs: the Optuna trial this run is. It reports its objective to the
    study at every validation and stops, FINISHED and tagged `pruned`, when the study's pruner says so."""
    study: str = ""
    """Set by hparams_search for its jobs: the study's storage URL."""
    study_name: str = ""
    """Set by hparams_search for its jobs: the study's name in that storage."""
    varies: list[str] = field(default_factory=list)
    """Set by a sweep for each of its jobs: the keys its jobs differ by (the Plan warns when they change a derived
    value, such as the global batch, that the sweep does not vary itself)."""


@dataclass
class DoctorConfig:
    steps: int = limited(60, ">= 4")
    """Training steps per trial, >= 4 (each trial is one short run of the config)."""
    tolerance: float = limited(0.5, "> 0")
    """A trial diverges when its final loss exceeds the float32 one-device baseline's by this fraction, > 0."""
    max_fixes: int = limited(4, ">= 1")
    """Candidate fixes tried (each a trial) before the doctor gives up on verifying one, >= 1."""


@dataclass
class Config:
    model: Any = MISSING
    dataset: Any = MISSING
    task: TaskConfig = field(default_factory=TaskConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    loss_scale: LossScaleConfig = field(default_factory=LossScaleConfig)
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    doctor: DoctorConfig = field(default_factory=DoctorConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    mode: Mode = Mode.train
    """train; doctor: short trials that find why this config breaks (NaN, divergence, a crash), name
    the layer and verify the overrides that fix it; eval / predict: a trained run's model on a dataset split
    (eval.*), metrics or predictions logged to MLflow, linked to the training run."""
    xla: str = "auto"
    """true, false or auto. A string, not an Enum: Hydra parses `xla=true` as a bool, which an
    Enum field rejects; the resolver validates it instead."""
    name: str = ""
    """A run name: the run dir becomes outputs/runs/<name>, so re-running the same command
    resumes it; also the MLflow run name. "" = a timestamped run dir."""
    seed: int = limited(0, ">= 0")
    """Seeds weights, data order and dropout."""
    deterministic: bool = False
    """TensorFlow op determinism (slower kernels): a resumed run matches an uninterrupted one bit for bit."""
    tune: str = "off"
    """auto: time the steps precision=auto and xla=auto allow (each in a child process, a few chunks on this
    model and data) on the first launch of this model, data, batch, strategy and machine, and use the fastest;
    later launches read the cached table. force: time them again. off: decide by the measured matmul rates."""
    explain: bool = False
    """Print and save the Plan, then exit without training."""
    tf_logs: bool = False
    """Show TensorFlow's C++ / absl log lines (quiet by default)."""
    objective: str = "auto"
    """The final epoch metric a sweep job returns (what hparams_search optimises); auto = the task's
    (val_accuracy for classification and sequence, val_auc for multilabel, val_loss for regression)."""


MODEL_SCHEMAS = {**{kind.name: kind.schema for kind in MODEL_KINDS.values()}, "custom": CustomModelConfig}
DATASET_SCHEMAS = {**{kind.name: kind.schema for kind in DATASET_KINDS.values()}, "custom": CustomDatasetConfig}
GROUP_SCHEMAS = {
    "task": TaskConfig,
    "precision": PrecisionConfig,
    "strategy": StrategyConfig,
    "loss_scale": LossScaleConfig,
    "scaling": ScalingConfig,
    "checkpoint": CheckpointConfig,
    "tracking": TrackingConfig,
}


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}: the dotted keys of plain config data, as MLflow params and overrides name them."""
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


def as_dict(config: Config) -> dict:
    """The typed config as plain data (Enums as their names): for config.yaml and MLflow params. Walked directly,
    not through `OmegaConf.structured` (what it gives, at ~26 ms a call where this takes ~0.6 ms; a launch
    calls it three times)."""
    return _plain(config)


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, DictConfig | ListConfig):
        return _plain(OmegaConf.to_container(value, enum_to_str=True))
    if isinstance(value, dict):
        return {key.name if isinstance(key, Enum) else key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def to_config(node) -> Config:
    """The composed config as typed objects; a key no section declares (a typo, added with `+`), a missing
    required value or a broken interpolation is a ConfigError naming the key (OmegaConf checks these only now,
    after Hydra composed)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

    raise_if_any(unknown_key_problems(node))
    try:
        return OmegaConf.to_object(node)
    except MissingMandatoryValue as err:
        key = err.full_key or "?"
        raise ConfigError.single(
            key,
            "???",
            "a value: this key has no default for the chosen option",
            f"set it on the command line, e.g. {key}=<value>",
        ) from None
    except OmegaConfBaseException as err:
        key = err.full_key or "?"
        reason = str(err.msg).splitlines()[0]
        fix = f"fix {key}'s value or interpolation (`python -m launcher --cfg job` shows it)"
        raise ConfigError.single(key, "(as composed)", f"a value that resolves ({reason})", fix) from None


def run_dir_name(name: str) -> str:
    """`${run_dir_name:${name}}` in hydra.run.dir: the given name, else a timestamp."""
    if name:
        return str(name)

    return datetime.now().strftime("%Y-%m-%d/%H-%M-%S-%f")


def register_configs() -> None:
    """Store the schemas so `conf/<group>/<option>.yaml` can extend them; the installed plugins' choices (read
    on every call: one installed since is a choice at the next launch)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("run_dir_name"):
        OmegaConf.register_new_resolver("run_dir_name", run_dir_name, use_cache=True)
    store_schemas()
    register_plugins(ConfigStore.instance())


def store_schemas() -> None:
    """The schemas in Hydra's store, once per process (each store converts its dataclass: ~0.3 CPU-s for all).
    Under schema/ so they are not offered as choices of the user-facing groups. A process forked from a server
    that stored them (`launcher.forkserver.server.PREPARE`) finds them there."""
    cs = ConfigStore.instance()
    if "config.yaml" in cs.repo.get("schema", {}):
        return
    cs.store(group="schema", name="config", node=Config)
    for name, node in MODEL_SCHEMAS.items():
        cs.store(group="schema/model", name=name, node=node)
    for name, node in DATASET_SCHEMAS.items():
        cs.store(group="schema/dataset", name=name, node=node)
    for group, node in GROUP_SCHEMAS.items():
        cs.store(group="schema", name=group, node=node)


def register_plugins(cs) -> None:
    """Installed plugins become choices: model=<name> / dataset=<name> (read from entry points, nothing imported).

    A plugin that ships YAML defaults for the same name (a `launcher.configs` package) takes precedence."""

    for name, path in plugins("model").items():
        if name not in MODEL_SCHEMAS:
            cs.store(group="model", name=name, node=CustomModelConfig(name=name, builder=path), provider="plugin")
    for name, path in plugins("dataset").items():
        if name not in DATASET_SCHEMAS:
            cs.store(group="dataset", name=name, node=CustomDatasetConfig(name=name, loader=path), provider="plugin")
