"""Structured-config schema: every key a person can set, with its type.

Closed choices are Enums, so a typo fails when Hydra composes the config and
the message names the full key and the valid values. YAML files in `conf/`
extend these schemas (see `register_configs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


class PrecisionName(Enum):
    fp32 = "fp32"
    mixed = "mixed"
    bf16 = "bf16"
    auto = "auto"


class StrategyKind(Enum):
    default = "default"
    one_device = "one_device"
    mirrored = "mirrored"
    multi_worker = "multi_worker"


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


class OptimizerName(Enum):
    adam = "adam"
    adamw = "adamw"
    sgd = "sgd"


class LrSchedule(Enum):
    constant = "constant"
    cosine = "cosine"


class SyntheticKind(Enum):
    image = "image"
    tabular = "tabular"
    tokens = "tokens"


class MonitorMode(Enum):
    min = "min"
    max = "max"


# --------------------------------------------------------------------- model


@dataclass
class MlpConfig:
    name: str = "mlp"
    hidden_units: list[int] = field(default_factory=lambda: [128, 64])
    activation: str = "relu"
    dropout: float = 0.0


@dataclass
class CnnConfig:
    name: str = "cnn"
    filters: list[int] = field(default_factory=lambda: [16, 32])
    kernel_size: int = 3
    dense_units: int = 64
    dropout: float = 0.0


@dataclass
class ResnetConfig:
    name: str = "resnet"
    # Any keras.applications ResNet family member; weights are never downloaded.
    variant: str = "ResNet50"
    min_input_size: int = 32


@dataclass
class TransformerConfig:
    name: str = "transformer"
    embed_dim: int = 32
    num_heads: int = 2
    ff_dim: int = 64
    num_layers: int = 2
    dropout: float = 0.0
    # Used for non-token inputs: each image row / feature chunk becomes a token.
    patch_size: int = 0


# ------------------------------------------------------------------- dataset


@dataclass
class DatasetBase:
    name: str = MISSING
    validation_split: float = 0.2
    shuffle_seed: int = 0
    shuffle_buffer: int = 10_000
    # Keep at most this many training examples (0 = all); handy for smoke runs.
    limit: int = 0


@dataclass
class DigitsConfig(DatasetBase):
    name: str = "digits"
    # "image" gives (8, 8, 1) inputs for convnets, "flat" gives 64 features.
    layout: str = "image"


@dataclass
class SyntheticConfig(DatasetBase):
    name: str = "synthetic"
    kind: SyntheticKind = SyntheticKind.image
    num_examples: int = 2048
    num_classes: int = 10
    shape: list[int] = field(default_factory=lambda: [16, 16, 3])
    vocab_size: int = 1000
    seed: int = 0


@dataclass
class NpzConfig(DatasetBase):
    name: str = "npz"
    path: str = MISSING
    x_key: str = "x"
    y_key: str = "y"


@dataclass
class ImageFolderConfig(DatasetBase):
    name: str = "image_folder"
    path: str = MISSING
    image_size: list[int] = field(default_factory=lambda: [32, 32])
    color_mode: str = "rgb"


# ---------------------------------------------------------------- the how


@dataclass
class PrecisionConfig:
    name: PrecisionName = PrecisionName.fp32


@dataclass
class StrategyConfig:
    kind: StrategyKind = StrategyKind.default
    # mirrored: replicas wanted (0 = every GPU; on a CPU-only machine the CPU is
    # split into this many logical devices, 2 when 0).
    devices: int = 0
    # one_device: "auto" (first GPU, else CPU) or a device string like "/cpu:0".
    device: str = "auto"


@dataclass
class LossScaleConfig:
    mode: LossScaleMode = LossScaleMode.auto
    implementation: LossScaleImpl = LossScaleImpl.auto
    initial_scale: float = 32768.0
    growth_interval: int = 2000
    min_scale: float = 1.0
    max_scale: float = 16777216.0
    value: float = 1024.0


@dataclass
class ScalingConfig:
    batch_rule: BatchRule = BatchRule["per_replica"]  # type: ignore[valid-type]
    batch_size: int = 64
    lr_rule: LrRule = LrRule.none
    reference_batch: int = 64
    warmup_epochs: float = 0.0
    warmup_steps: int = 0


@dataclass
class OptimizerConfig:
    name: OptimizerName = OptimizerName.adam
    learning_rate: float = 1e-3
    schedule: LrSchedule = LrSchedule.constant
    momentum: float = 0.9
    weight_decay: float = 0.0
    clipnorm: float = 0.0


@dataclass
class EarlyStoppingConfig:
    enabled: bool = False
    monitor: str = "val_loss"
    patience: int = 3
    mode: MonitorMode = MonitorMode.min


@dataclass
class ReduceLrConfig:
    enabled: bool = False
    monitor: str = "val_loss"
    factor: float = 0.5
    patience: int = 2
    mode: MonitorMode = MonitorMode.min


@dataclass
class ProfileConfig:
    # Trace this many training steps with TensorFlow's profiler (0 = off), after skipping
    # skip_steps (tracing and compilation). Trace + top_ops.txt go to <run dir>/profile and MLflow.
    steps: int = 0
    skip_steps: int = 10


@dataclass
class TrainConfig:
    epochs: int = 5
    # Steps run inside one tf.function call (fewer Python round trips).
    steps_per_execution: int = 16
    # Cap on steps per epoch (0 = the whole training split).
    max_steps_per_epoch: int = 0
    terminate_on_nan: bool = True
    # Count the model's FLOPs and this machine's matmul peak (measured once, cached) to log
    # model_flops_utilization per epoch.
    measure_utilization: bool = True
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)
    reduce_lr_on_plateau: ReduceLrConfig = field(default_factory=ReduceLrConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)


@dataclass
class CheckpointConfig:
    enabled: bool = True
    # Save at every multiple of interval_steps (global steps) and at the end of every
    # interval_epochs-th epoch; 0 turns either off.
    interval_epochs: int = 1
    interval_steps: int = 0
    max_to_keep: int = 3
    # auto: continue from the run dir's newest complete checkpoint; never (previous
    # checkpoints are moved aside, not deleted); or a checkpoint prefix path.
    resume: str = "auto"
    # Keep the best checkpoint by this epoch metric (e.g. val_loss); "" = off.
    monitor: str = ""
    mode: MonitorMode = MonitorMode.min
    # SIGTERM / SIGINT: save at the next step boundary, mark the MLflow run KILLED, exit 128+signal.
    save_on_preemption: bool = True
    # After the first save, restore it into fresh objects and check every variable is consumed.
    verify_restore: bool = True
    # Export the final (and best, when monitored) model as .keras and log it to MLflow.
    export_model: bool = True


@dataclass
class TrackingConfig:
    enabled: bool = True
    uri: str = "sqlite:///outputs/mlflow.db"
    experiment: str = "launcher"
    run_name: str = ""
    # Set by a sweep for its jobs: the parent MLflow run and the sweep's id.
    parent_run_id: str = ""
    sweep_id: str = ""


@dataclass
class Config:
    model: Any = MISSING
    dataset: Any = MISSING
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    loss_scale: LossScaleConfig = field(default_factory=LossScaleConfig)
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    # true | false | auto. A string, not an Enum: Hydra parses `xla=true` as a
    # bool, which an Enum field rejects; the resolver validates it instead.
    xla: str = "auto"
    # A run name: the run dir becomes outputs/runs/<name>, so re-running the same command
    # finds its checkpoints (resume=auto); also the MLflow run name. "" = a timestamped dir.
    name: str = ""
    seed: int = 0
    deterministic: bool = False
    explain: bool = False
    # Show TensorFlow's C++ / absl log lines (quiet by default).
    tf_logs: bool = False
    # The final epoch metric a sweep job returns (what hparams_search optimises).
    objective: str = "val_accuracy"


MODEL_SCHEMAS = {
    "mlp": MlpConfig,
    "cnn": CnnConfig,
    "resnet": ResnetConfig,
    "transformer": TransformerConfig,
}
DATASET_SCHEMAS = {
    "digits": DigitsConfig,
    "synthetic": SyntheticConfig,
    "npz": NpzConfig,
    "image_folder": ImageFolderConfig,
}
GROUP_SCHEMAS = {
    "precision": PrecisionConfig,
    "strategy": StrategyConfig,
    "loss_scale": LossScaleConfig,
    "scaling": ScalingConfig,
    "checkpoint": CheckpointConfig,
    "tracking": TrackingConfig,
}


def run_dir_name(name: str) -> str:
    """`${run_dir_name:${name}}` in hydra.run.dir: the given name, else a timestamp."""
    if name:
        return str(name)
    from datetime import datetime

    return datetime.now().strftime("%Y-%m-%d/%H-%M-%S-%f")


def register_configs() -> None:
    """Store the schemas so `conf/<group>/<option>.yaml` can extend them."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("run_dir_name"):
        OmegaConf.register_new_resolver("run_dir_name", run_dir_name, use_cache=True)
    # Under schema/ so they are not offered as choices of the user-facing groups.
    cs = ConfigStore.instance()
    cs.store(group="schema", name="config", node=Config)
    for name, node in MODEL_SCHEMAS.items():
        cs.store(group="schema/model", name=name, node=node)
    for name, node in DATASET_SCHEMAS.items():
        cs.store(group="schema/dataset", name=name, node=node)
    for group, node in GROUP_SCHEMAS.items():
        cs.store(group="schema", name=group, node=node)
