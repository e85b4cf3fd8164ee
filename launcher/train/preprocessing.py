"""What turns a raw example, as a client holds it, into the model's input: carried by the data source, run by its
training pipeline and exported inside every served model (`launcher.export.serving`).

So a client that sends a JPEG, or the uint8 pixels of an image, gets the answer training would give, and nobody
has to copy the data pipeline's arithmetic into a server. A dataset gives its own (image folders decode, resize
and scale; TFRecord shards parse); a user's loader may hand over a Keras layer or a `tf.function`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
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
    scales_pixels: bool = False  # `apply` scales 0-255 pixels to [0, 1] (an image folder's); see `pixel_scaling`

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

    def unscaled(self) -> Preprocessing:
        """The same ways in with the pixels left 0-255 (as float32): for a model that scales them itself."""

        def apply(raw: dict) -> dict:
            import tensorflow as tf

            return {name: tf.cast(value, tf.float32) for name, value in raw.items()}

        return replace(self, apply=apply, scales_pixels=False)


def pixel_scaling(model, source) -> tuple[str, str] | None:
    """Which side scales an image folder's 0-255 pixels, as (side, reason) for the Plan's `data.pixels`: the model
    when it has a Rescaling layer of its own (keras.io's models begin with `Rescaling(1.0 / 255)`; the data then
    hands it the pixels as they are, in training and in every export, so nothing is scaled twice), else the data.
    None when the data's preprocessing scales no pixels."""
    import keras

    if source.preprocessing is None or not source.preprocessing.scales_pixels:
        return None
    own = [layer.name for layer in model._flatten_layers() if isinstance(layer, keras.layers.Rescaling)]
    if own:
        source.preprocessing = source.preprocessing.unscaled()
        return "model", f"the model's own Rescaling ({own[0]}) scales: the data hands it 0-255 pixels, never /255 first"
    return "data", "the data scales 0-255 pixels to [0, 1] (/255): the model has no Rescaling layer of its own"


def image_preprocessing(
    height: int, width: int, channels: int, files: Callable[[], list], examples: Callable[[int], list] | None = None
) -> Preprocessing:
    """An image folder's: pixels (uint8 or float, 0-255) scaled to [0, 1]; encoded images of any size decoded and
    resized first, as `image_dataset_from_directory` did for training (bilinear). `files`: the image files, for
    raw examples; or `examples(n)`: n encoded images (a loader's pixels, PNG-encoded)."""

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
        return examples(count) if examples is not None else [path.read_bytes() for path in files()[:count]]

    def raw_examples(count: int) -> dict[str, np.ndarray]:
        import tensorflow as tf

        pixels = decode(tf.constant(encoded_examples(count)))["inputs"]
        return {"inputs": tf.cast(tf.clip_by_value(tf.round(pixels), 0, 255), tf.uint8).numpy()}

    images = Encoded("serving_images", "images", decode, encoded_examples)
    return Preprocessing(apply, {"inputs": "uint8"}, (images,), "serving_images", raw_examples, scales_pixels=True)


def loader_images(source) -> Preprocessing:
    """A loader's `"raw_images": True`: its one feature array is images as 0-255 pixels (H, W, C), so it gets an
    image folder's preprocessing: scaled to [0, 1] (or by the model's own Rescaling) and the `serving_images`
    signature of encoded bytes; the first training images, PNG-encoded, are its examples."""

    def examples(count: int) -> list[bytes]:
        import tensorflow as tf

        pixels = tf.cast(tf.clip_by_value(tf.round(source.first_raw(count, "train")), 0, 255), tf.uint8)
        return [tf.io.encode_png(image).numpy() for image in pixels]

    height, width, channels = source.input_shape
    return image_preprocessing(height, width, channels, list, examples)


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
