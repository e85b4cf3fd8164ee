"""`model.adapt=pkg.mod:adapt`: a person's preprocessing layers adapted on the training split, once, before the
model is built.

keras.io adapts its `Normalization`, `StringLookup`, `TextVectorization` layers on the training data before it
builds the model. `adapt(spec, train)` is that place: called inside the strategy scope (under the float32 policy,
as Keras adapts: the layers it makes compute in float32 inside a mixed model) with the training split
alone (a batched, unshuffled tf.data of `(x, y)` or `(x, y, sample_weight)`, the loader's preprocess applied; never
val or test), it returns the adapted layers by name, and the builder takes them as `adapted=`. They are saved
beside the checkpoints (`adapted.keras`, Keras's own format: variables and vocabularies), so a resumed run reads
them back instead of adapting again. What was adapted is the Plan's `model.adapted`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import keras

from launcher.config.errors import ConfigError
from launcher.config.imports import check_call, import_component
from launcher.config.models import model_kind
from launcher.config.raised import told
from launcher.train.model_io import ModelSpec
from launcher.train.runtime import float32_policy

ADAPTED_FILE = "adapted.keras"  # in the checkpoint directory
BATCH = 256  # examples per batch of the training split handed to adapt
SHOWN_SIGNATURE = "adapt(spec, train) -> {name: adapted keras layer} (train: batched tf.data of the training split)"


@keras.saving.register_keras_serializable(package="launcher")
class AdaptedLayers(keras.layers.Layer):
    """The adapted layers by name, held by one layer so Keras saves and loads them whole (their vocabularies too)."""

    def __init__(self, adapted: dict | None = None, **kwargs):
        super().__init__(**kwargs)
        self.adapted = dict(adapted or {})
        self.built = True

    def get_config(self) -> dict:
        layers = {name: keras.saving.serialize_keras_object(layer) for name, layer in self.adapted.items()}
        return {**super().get_config(), "adapted": layers}

    @classmethod
    def from_config(cls, config: dict):
        layers = {name: keras.saving.deserialize_keras_object(c) for name, c in config.pop("adapted").items()}
        return cls(layers, **config)


@dataclass(frozen=True)
class Adapted:
    """What `model.adapt` gave the builder, what each layer holds and where it was adapted (the Plan's
    `model.adapted`), and whether this launch adapted them (to be saved beside the checkpoints) or read them back."""

    layers: dict
    described: dict[str, str]
    reason: str
    fresh: bool


def adapt_once(model, source, strategy, checkpoints: Path | None) -> Adapted | None:
    """The adapted layers for the builder, inside the strategy scope: read back from `checkpoints` (a resumed
    run's directory; None when this launch does not resume) when saved there, else `model.adapt` called on the
    training split. None when no adapt function is configured."""
    if model_kind(model).builtin or not str(model.adapt).strip():
        return None
    path = str(model.adapt).strip()
    function = import_component("model.adapt", path, "an adapt function")
    check_call("model.adapt", path, function, (ModelSpec.of(source), None), {}, SHOWN_SIGNATURE)
    saved = checkpoints / ADAPTED_FILE if checkpoints is not None else None
    with strategy.scope(), float32_policy():  # Keras adapts in float32 (Normalization.adapt fails under bf16)
        if saved is not None and saved.is_file():
            layers = keras.saving.load_model(saved, compile=False).adapted
            reason = f"read back from {saved}: the run resumes with the state it adapted, nothing is adapted again"
            return Adapted(layers, _described_all(layers), reason, fresh=False)
        layers = _called(function, path, source)
    reason = f"{path} on the training split alone ({source.num_train} examples; validation and test never)"
    return Adapted(layers, _described_all(layers), reason, fresh=True)


def save_adapted(adapted: Adapted | None, checkpoints: Path) -> None:
    """Write what this launch adapted beside the checkpoints, whole or not at all (a resumed run reads it)."""
    if adapted is None or not adapted.fresh:
        return
    checkpoints.mkdir(parents=True, exist_ok=True)
    partial = checkpoints / f".{ADAPTED_FILE}.{os.getpid()}.keras"
    keras.saving.save_model(AdaptedLayers(adapted.layers), partial)
    os.replace(partial, checkpoints / ADAPTED_FILE)


def _called(function, path: str, source) -> dict:
    train = source.pipeline("train", BATCH, False, None)  # the training split alone, unshuffled
    try:
        layers = function(ModelSpec.of(source), train)
    except ConfigError:
        raise
    except Exception as err:
        raise ConfigError.single(
            "model.adapt",
            path,
            "an adapt function that runs (it raised the error below)",
            "fix it where it raised (call it on your training data in Python for the whole traceback)",
            detail=told(err, function),
        ) from None
    if not (isinstance(layers, dict) and layers and all(isinstance(v, keras.layers.Layer) for v in layers.values())):
        raise ConfigError.single(
            "model.adapt",
            path,
            f"an adapt function that returns its adapted Keras layers by name (it returned {type(layers).__name__})",
            'return {"age": normalizer, "city": lookup} (each a keras layer, .adapt() called on train)',
        )
    return {str(name): layer for name, layer in layers.items()}


def _described_all(layers: dict) -> dict[str, str]:
    return {name: _described(layer) for name, layer in layers.items()}


def _described(layer) -> str:
    """What an adapted layer holds: its class, its vocabulary's size, its variables' shapes."""
    parts = []
    vocabulary_size = getattr(layer, "vocabulary_size", None)  # the lookup layers' (StringLookup, TextVectorization)
    if callable(vocabulary_size):
        parts.append(f"vocabulary of {vocabulary_size()}")
    if shapes := [str(tuple(variable.shape)) for variable in layer.weights]:
        parts.append("variables " + ", ".join(shapes))
    return type(layer).__name__ + (f" ({'; '.join(parts)})" if parts else "")
