"""The models the launcher knows, each saying what it is: the resolver asks this table.

Adding a built-in model is one `ModelKind` entry here with its schema dataclass (plus its builder
module under `models/` and `conf/model/<name>.yaml`). Installed plugins and `model=custom` get a
generic kind: what only the built model can show is checked when it is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from launcher.config.bounds import limited

# Each field's docstring says what it does, its unit and its range; `launcher.config.bounds`
# holds the range checks the resolver runs.


@dataclass
class ModelBase:
    """What every model takes besides its architecture: where its first weights come from, what is frozen."""

    name: str = ""
    init_from: str = ""
    """Start from trained weights: a run (a name under outputs/runs, a run dir or an MLflow run id: its best.keras,
    else its model.keras), a registered model (models:/name/version), a .keras file or a ckpt-N checkpoint prefix.
    Loaded into this config's model by layer name and shape, inside the strategy scope under this run's precision;
    the optimizer starts fresh at step 0 in a new MLflow run. "" = from scratch."""
    init_skip_mismatch: bool = False
    """init_from: leave the layers whose shapes differ (a new head) or that the source lacks at their fresh initial
    values (listed in the Plan) instead of refusing."""
    freeze: list[str] = field(default_factory=list)
    """Layers not trained, by name or glob (e.g. [dense_0, conv_*]; a nested model by its name freezes all of it);
    BatchNormalization in them runs in inference mode. train.unfreeze_at_epoch trains them again."""
    layer_swaps: str = "auto"
    """auto: stock layers run fused kernels where those compute the same (BatchNormalization as FusedBatchNormV3;
    the Plan lists each layer and why); off: every layer as stock Keras. Checkpoints are the same either way."""


# Keys of a model config that are not its architecture: a resumed run may change them.
TRAINING_KEYS = ("init_from", "init_skip_mismatch", "freeze", "layer_swaps")


def architecture(model_settings: dict) -> dict:
    """The model config without TRAINING_KEYS: what a checkpoint must have been trained with to be resumed."""
    return {key: value for key, value in model_settings.items() if key not in TRAINING_KEYS}


@dataclass
class MlpConfig(ModelBase):
    name: str = "mlp"
    hidden_units: list[int] = limited(bound="each >= 1", factory=lambda: [128, 64])
    """Width of each hidden Dense layer, input to output; each >= 1."""
    activation: str = "relu"
    """Keras activation name for the hidden layers."""
    dropout: float = limited(0.0, "[0, 1)")
    """Dropout rate after each hidden layer, in [0, 1)."""


@dataclass
class CnnConfig(ModelBase):
    name: str = "cnn"
    filters: list[int] = limited(bound="each >= 1", factory=lambda: [16, 32])
    """Filters of each conv block (conv + pool), input to output; each >= 1."""
    kernel_size: int = limited(3, ">= 1")
    """Square kernel side in pixels, >= 1."""
    dense_units: int = limited(64, ">= 1")
    """Width of the Dense layer before the classifier, >= 1."""
    dropout: float = limited(0.0, "[0, 1)")
    """Dropout rate before the classifier, in [0, 1)."""


@dataclass
class ResnetConfig(ModelBase):
    name: str = "resnet"
    variant: str = "ResNet50"
    """Any keras.applications ResNet family member."""
    weights: str = "none"
    """The backbone's starting weights: none (random), a local weights file (model.save_weights of this variant's
    backbone, include_top=False), or imagenet when Keras's cache already holds the file (never downloaded at run
    time; refused with the path and how to put it there otherwise)."""
    min_input_size: int = limited(32, ">= 1")
    """Inputs are resized up to at least max(this, 32) pixels per side (ResNet's minimum)."""


@dataclass
class TransformerConfig(ModelBase):
    name: str = "transformer"
    embed_dim: int = limited(32, ">= 1")
    """Token embedding width, >= 1 and a multiple of num_heads."""
    num_heads: int = limited(2, ">= 1")
    """Attention heads per layer, >= 1."""
    ff_dim: int = limited(64, ">= 1")
    """Hidden width of each feed-forward block, >= 1."""
    num_layers: int = limited(2, ">= 1")
    """Encoder layers, >= 1."""
    dropout: float = limited(0.0, "[0, 1)")
    """Dropout rate in attention and feed-forward blocks, in [0, 1)."""
    patch_size: int = limited(0, ">= 0")
    """Tabular inputs: features per token, >= 0 (0 = features // 8); images: a token per row."""


@dataclass
class CustomModelConfig(ModelBase):
    name: str = "custom"
    """custom, or the name of an installed plugin model (entry point group launcher.models)."""
    builder: str = ""
    """Your builder as module.path:function, called as builder(spec, **params) inside the strategy scope under the
    Plan's dtype policy; returns an unbuilt-or-built keras.Model whose output is logits. "" = the plugin `name`."""
    params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the builder, e.g. model.params='{units: 64}'."""
    adapt: str = ""
    """Your adapt function as module.path:function, called once as adapt(spec, train) inside the strategy scope with
    the training split alone (batched tf.data); the layers it adapts and returns by name go to the builder as
    builder(spec, adapted=..., **params) and are saved beside the checkpoints for a resumed run. "" = none."""
    convolutional: bool = False
    """Your model is mostly convolutions (xla=auto then keeps XLA off on CPU, as for the built-in convnets)."""
    per_token: bool = True
    """Your model can predict a token per position (task=sequence); its output shape is checked when built."""


@dataclass(frozen=True)
class ModelKind:
    """What a model is, as far as the rules care."""

    name: str
    schema: type
    """The structured config of `model=<name>` (stored in Hydra's ConfigStore)."""
    builder: str | None
    """Module with `check(cfg, source)` and `build(cfg, source)`; None: the user's builder by import path."""
    convolutional: bool = False
    """Mostly convolutions: XLA's CPU convolutions are slower than oneDNN's (xla=auto keeps them off on CPU)."""
    per_token: bool = False
    """Predicts a token per position, so it can serve task=sequence."""

    @property
    def builtin(self) -> bool:
        return self.builder is not None


MODEL_KINDS: dict[str, ModelKind] = {
    kind.name: kind
    for kind in (
        ModelKind("mlp", MlpConfig, "launcher_models.mlp"),
        ModelKind("cnn", CnnConfig, "launcher_models.cnn", convolutional=True),
        ModelKind("resnet", ResnetConfig, "launcher_models.resnet", convolutional=True),
        ModelKind("transformer", TransformerConfig, "launcher_models.transformer", per_token=True),
    )
}


def model_kind(model: Any) -> ModelKind:
    """What the configured model is: its table entry, or for `model=custom` and installed plugins what their
    config declares (`model.convolutional`, `model.per_token`; a plugin's own YAML can set them)."""
    name = str(model.name)
    if name in MODEL_KINDS:
        return MODEL_KINDS[name]
    return ModelKind(
        name,
        CustomModelConfig,
        None,
        convolutional=bool(getattr(model, "convolutional", False)),
        per_token=bool(getattr(model, "per_token", True)),
    )
