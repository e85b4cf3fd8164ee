"""What turns a raw example, as a client holds it, into the model's input: carried by the data source, run by its
training pipeline and exported inside every served model (`launcher.export.serving`).

So a client that sends a JPEG, or the uint8 pixels of an image, gets the answer training would give, and nobody
has to copy the data pipeline's arithmetic into a server. A dataset gives its own (image folders decode, resize
and scale; TFRecord shards parse); a user's loader may hand over a Keras layer or a `tf.function`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

IMAGE_EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")  # what image_dataset_from_directory reads


@dataclass(frozen=True)
class Encoded:
    """Another way in: encoded bytes (image files, serialized tf.Examples), decoded into the raw inputs. Exported
    as its own SavedModel signature, `signature(<input>: string [n])`."""

    signature: str  # serving_images, serving_examples
    input: str  # images, examples
    decode: Callable[[Any], dict]  # [n] tf.string -> raw inputs by name (batched tensors)
    examples: Callable[[int], list[bytes]] | None = None  # n encoded examples, as a client sends them


@dataclass(frozen=True)
class Preprocessing:
    """Raw inputs by name -> the features the model trained on, by the same names. `raw` gives each raw input's
    dtype where it is not the feature's (uint8 pixels); `served` names the signature the MLflow model serves."""

    apply: Callable[[dict], dict] | None = None  # raw inputs by name (batched) -> features by name; None: as they are
    raw: dict[str, str] = field(default_factory=dict)  # input name -> raw dtype (uint8); others as the feature
    encoded: tuple[Encoded, ...] = ()
    served: str = "serving_default"
    raw_examples: Callable[[int], dict[str, np.ndarray]] | None = None  # n examples in the raw form, by name
    tracked: tuple = ()  # objects holding TensorFlow state `apply` uses (a layer's lookup table): exported with it

    def prepare(self, raw: dict):
        """The features the model takes, from a batch of raw inputs by name: by the same names, or one tensor where
        the preprocessing joins them (a Keras FeatureSpace's `concat`: named features in, one model input out)."""
        return raw if self.apply is None else self.apply(raw)

    @property
    def changes_features(self) -> bool:
        """Whether a training batch needs it (an encoded way in alone changes nothing the pipeline feeds)."""
        return self.apply is not None

    def encoded_by_signature(self, signature: str) -> Encoded | None:
        return next((e for e in self.encoded if e.signature == signature), None)


def image_preprocessing(height: int, width: int, channels: int, files: Callable[[], list]) -> Preprocessing:
    """An image folder's: pixels (uint8 or float, 0-255) scaled to [0, 1]; encoded images of any size decoded and
    resized first, as `image_dataset_from_directory` did for training (bilinear). `files`: the image files, for
    raw examples."""

    def apply(raw: dict) -> dict:
        import tensorflow as tf

        return {"inputs": tf.cast(raw["inputs"], tf.float32) / 255.0}

    def decode(images) -> dict:
        import tensorflow as tf

        def one(data):
            image = tf.io.decode_image(data, channels=channels, expand_animations=False)
            image.set_shape([None, None, channels])
            return tf.image.resize(image, (height, width))

        shape = tf.TensorSpec([height, width, channels], tf.float32)
        return {"inputs": tf.map_fn(one, images, fn_output_signature=shape)}

    def encoded_examples(count: int) -> list[bytes]:
        return [path.read_bytes() for path in files()[:count]]

    def raw_examples(count: int) -> dict[str, np.ndarray]:
        import tensorflow as tf

        pixels = decode(tf.constant(encoded_examples(count)))["inputs"]
        return {"inputs": tf.cast(tf.clip_by_value(tf.round(pixels), 0, 255), tf.uint8).numpy()}

    images = Encoded("serving_images", "images", decode, encoded_examples)
    return Preprocessing(apply, {"inputs": "uint8"}, (images,), "serving_images", raw_examples)


def image_files(root, classes: list[str]) -> list:
    """The image files of a class folder tree, in a fixed order (class, then name)."""
    return [
        path
        for name in classes
        for path in sorted((root / name).rglob("*"))
        if path.suffix.lower() in IMAGE_EXTENSIONS and path.is_file()
    ]


def users(given) -> Preprocessing:
    """A loader's own preprocessing (a Keras layer, a `tf.function` or any callable of TensorFlow ops): called on
    the raw features (an array, or the dict of named ones) and returning the model's input in the same form, or,
    from named features, one tensor (a Keras FeatureSpace with output_mode="concat")."""

    def apply(raw: dict):
        if list(raw) == ["inputs"]:
            return {"inputs": given(raw["inputs"])}
        prepared = given(raw)
        return dict(prepared) if isinstance(prepared, Mapping) else prepared

    tf = sys.modules.get("tensorflow")  # a callable of TensorFlow ops: TensorFlow is loaded already
    stateful = tf is not None and isinstance(given, tf.__internal__.tracking.Trackable)  # a layer, a tf.Module
    return Preprocessing(apply, tracked=(given,) if stateful else ())
