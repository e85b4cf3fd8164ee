"""The datasets the launcher knows: each one's name, its config schema and its loader module, in one table.

Adding a built-in dataset is one `DatasetKind` entry here with its schema dataclass (plus its loader module
`datasets/<name>.py`, imported as `launcher_datasets.<name>`, and `conf/dataset/<name>.yaml`). The schema's
choices (`DATASET_SCHEMAS`) and the build's registry (`launcher.train.registry.DATASETS`) are made from it.
`dataset=custom` and installed plugins go through the user's loader by import path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from omegaconf import MISSING

from launcher.config.bounds import limited


class SyntheticKind(Enum):
    image = "image"
    tabular = "tabular"
    tokens = "tokens"


@dataclass
class DatasetBase:
    name: str = MISSING
    validation_split: float = limited(0.2, "(0, 1)")
    """Fraction of the examples held out for validation, in (0, 1)."""
    test_split: float = limited(0.0, "[0, 1)")
    """Fraction held out as a test split, in [0, 1) (0 = none), never trained or validated on: evaluated once
    after training (train.test_at_end) or by mode=eval eval.split=test. Array datasets (digits, synthetic, npz,
    a custom loader's (x, y)) take it before the validation examples; streamed ones bring their own test data
    (tfrecord: dataset.test, image_folder: dataset.test_path, a custom loader: a "test" entry)."""
    shuffle_seed: int = limited(0, ">= 0")
    """Seed of the one-time shuffle before the train/validation split."""
    shuffle_buffer: int = limited(10_000, ">= 1")
    """Examples in the per-epoch shuffle buffer (capped at the split's size), >= 1."""
    limit: int = limited(0, ">= 0")
    """Keep at most this many training examples (0 = all), >= 0; handy for smoke runs."""


@dataclass
class DigitsConfig(DatasetBase):
    name: str = "digits"
    layout: str = "image"
    """"image" gives (8, 8, 1) inputs for convnets, "flat" gives 64 features."""


@dataclass
class SyntheticConfig(DatasetBase):
    name: str = "synthetic"
    kind: SyntheticKind = SyntheticKind.image
    """image (H, W, C floats), tabular (features) or tokens (integer ids)."""
    num_examples: int = 2048
    """Examples generated (train + validation), >= 2."""
    num_classes: int = limited(10, ">= 0", fix=0)
    """Label classes, >= 2."""
    shape: list[int] = field(default_factory=lambda: [16, 16, 3])
    """Shape of one example: [H, W, C] for images, [features], [length] for tokens."""
    vocab_size: int = 1000
    """tokens only: ids are drawn from [0, vocab_size), >= 2."""
    seed: int = limited(0, ">= 0")
    """Seed of the generated data (a different seed gives different data)."""


@dataclass
class NpzConfig(DatasetBase):
    name: str = "npz"
    path: str = MISSING
    """Path to a .npz file (relative to the launch directory)."""
    x_key: str = "x"
    """Array name of the inputs in the file."""
    y_key: str = "y"
    """Array name of the integer labels in the file."""
    num_classes: int = limited(0, ">= 0")
    """Label classes, >= 0 (0 = the largest label + 1); a label outside 0..num_classes-1 is refused."""
    drop_nonfinite: bool = False
    """Drop examples whose inputs hold NaN or inf at load (and say how many); false refuses such a file."""


@dataclass
class TfrecordConfig(DatasetBase):
    name: str = "tfrecord"
    train: str = MISSING
    """Glob of the training shards, e.g. data/digits/train-*.tfrecord (relative to the launch directory)."""
    val: str = ""
    """Glob of the validation shards; "" = val-* beside the training shards."""
    test: str = ""
    """Glob of the test shards; "" = test-* beside the training shards when there are any (else no test split)."""
    features: dict[str, Any] = field(default_factory=dict)
    """{name: {shape, dtype: float32|int64, encoding: raw|image}}; {} = from dataset.json beside the shards."""
    x_key: str = "x"
    """The feature that is the model's input."""
    y_key: str = "y"
    """The feature that is the integer label."""
    num_classes: int = limited(0, ">= 0")
    """Label classes, >= 0 (0 = from dataset.json)."""
    cache: bool = False
    """Cache the parsed examples in memory after the first epoch (data that fits)."""
    parallel_calls: int = -1
    """Files read and records parsed in parallel; -1 = AUTOTUNE."""
    prefetch: int = -1
    """Batches prepared ahead of the step; -1 = AUTOTUNE."""


@dataclass
class CustomDatasetConfig(DatasetBase):
    name: str = "custom"
    """custom, or the name of an installed plugin dataset (entry point group launcher.datasets)."""
    loader: str = ""
    """Your loader as module.path:function, called as loader(**params); returns (x, y) or (x, y, sample_weight)
    arrays (split by validation_split and test_split), {"train": ..., "val": ...} of those, or of unbatched tf.data
    datasets yielding them, either dict with an optional "test" entry. x is an array, a tuple of arrays or a dict
    of named features; y an array or a dict by output name. "" = the plugin `name`."""
    params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the loader."""
    num_classes: int = limited(0, ">= 0")
    """Classification: label classes (0 = the largest label + 1); multilabel: labels per example (0 = from y)."""
    kind: str = "auto"
    """Input kind for built-in models: image (H, W, C), tabular (features), tokens (ids) or auto (from x)."""


@dataclass
class ImageFolderConfig(DatasetBase):
    name: str = "image_folder"
    path: str = MISSING
    """A folder with one sub-folder of images per class."""
    image_size: list[int] = field(default_factory=lambda: [32, 32])
    """[height, width] in pixels every image is resized to."""
    color_mode: str = "rgb"
    """rgb (3 channels) or grayscale (1)."""
    test_path: str = ""
    """A folder laid out like `path` (one sub-folder per class, the same classes) holding the test split;
    "" = no test split."""


@dataclass(frozen=True)
class DatasetKind:
    """A built-in dataset, as the schema and the build ask for it."""

    name: str
    schema: type
    """The structured config of `dataset=<name>` (stored in Hydra's ConfigStore)."""
    loader: str
    """Module with `load(cfg) -> DataSource` (`launcher.train.data`), imported only when a run names it."""


DATASET_KINDS: dict[str, DatasetKind] = {
    kind.name: kind
    for kind in (
        DatasetKind("digits", DigitsConfig, "launcher_datasets.digits"),
        DatasetKind("synthetic", SyntheticConfig, "launcher_datasets.synthetic"),
        DatasetKind("npz", NpzConfig, "launcher_datasets.npz"),
        DatasetKind("image_folder", ImageFolderConfig, "launcher_datasets.image_folder"),
        DatasetKind("tfrecord", TfrecordConfig, "launcher_datasets.tfrecord"),
    )
}
