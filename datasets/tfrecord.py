"""TFRecord shards: data that streams from files instead of living in memory.

The shards are read with `tf.data` (interleaved across files, parsed and decoded with parallel calls,
optionally cached), never loaded whole. The feature spec comes from `dataset.features` or from the
`dataset.json` the converter (`python -m launcher_datasets.to_tfrecord`) writes beside the shards, with
the example count of every shard, so steps per epoch are known without a pass over the data and a
multi-worker job can shard by file (see `launcher.plan.sharding`).

Feature spec: `{name: {shape: [...], dtype: float32|int64, encoding: raw|image}}`; `raw` features are
stored flat (float_list / int64_list) and reshaped, `image` features are encoded PNG/JPEG bytes decoded
and resized to `shape` ([H, W, C]) and scaled to [0, 1]. Every export also takes serialized tf.Examples
(`serving_examples`) and parses them inside the model the same way.

Several named inputs and heads: give features a `role` (input, target or weight). The inputs then stream as
a dict by name (the model's input names), the targets as a dict by head when there are several, and a `weight`
feature as each example's sample weight; dataset.x_key and dataset.y_key are not used.
"""

from __future__ import annotations

import glob
import json
import math
from pathlib import Path

from launcher.config.errors import ConfigError, Violation, raise_if_any
from launcher.train.data import DataSource
from launcher.train.data_checks import streamed_test_split
from launcher.train.preprocessing import Encoded, Preprocessing

METADATA = "dataset.json"
ENCODINGS = ("raw", "image")
DTYPES = ("float32", "int64")
ROLES = ("input", "target", "weight")


def load(cfg) -> DataSource:
    train_files = _files("dataset.train", str(cfg.train))
    val_glob = str(cfg.val) or str(Path(str(cfg.train)).expanduser().parent / "val-*")
    val_files = _files("dataset.val", val_glob)
    metadata = _metadata(train_files[0].parent)
    features = dict(cfg.features) or metadata.get("features", {})
    inputs, targets, weight = _roles(features, cfg.x_key, cfg.y_key, train_files[0].parent)
    train_counts = _counts(train_files, metadata, "train")
    val_counts = _counts(val_files, metadata, "val")
    x_spec = features[inputs[0]]
    num_classes = int(cfg.num_classes or metadata.get("num_classes", 0))
    if num_classes < 2 and len(targets) == 1:
        raise ConfigError.single(
            "dataset.num_classes",
            cfg.num_classes,
            "the number of label classes (>= 2; not found in dataset.json)",
            "dataset.num_classes=10",
        )
    kind = metadata.get("kind") or (
        "image" if len(x_spec["shape"]) == 3 else "tokens" if x_spec.get("dtype") == "int64" else "tabular"
    )
    named = _has_roles(features)
    parse = _parser(features, inputs, targets, weight, named)
    streamed_test_split(cfg, "dataset.test=<glob of test shards> (or test-* files beside the training shards)")
    test_files = _test_files(cfg)
    return DataSource(
        train=_reader([str(f) for f in train_files], parse, cfg),
        val=_reader([str(f) for f in val_files], parse, cfg),
        num_train=sum(train_counts),
        num_val=sum(val_counts),
        input_shape=tuple(int(d) for d in x_spec["shape"]),
        num_classes=num_classes if len(targets) == 1 else 0,
        kind=kind,
        vocab_size=int(metadata.get("vocab_size", 0)),
        train_shards=tuple(train_counts),
        prefetch=int(cfg.prefetch),
        test=_reader([str(f) for f in test_files], parse, cfg) if test_files else None,
        num_test=sum(_counts(test_files, metadata, "test")) if test_files else 0,
        feature_names=tuple(inputs) if named else (),
        head_names=tuple(targets) if len(targets) > 1 else (),
        weighted=weight is not None,
        preprocessing=_examples(features, inputs, named, val_files),
    )


def _has_roles(features: dict) -> bool:
    return any("role" in dict(spec) for spec in features.values())


def _roles(features: dict, x_key: str, y_key: str, folder: Path) -> tuple[list[str], list[str], str | None]:
    """The inputs, the targets and the weight feature: by `role` when the spec gives roles, else x_key and y_key."""
    _check_features(features, x_key, y_key, folder)
    if not _has_roles(features):
        return [x_key], [y_key], None
    by_role = {role: [n for n, spec in features.items() if dict(spec).get("role") == role] for role in ROLES}
    unknown = [n for n, spec in features.items() if dict(spec).get("role") not in ROLES]
    found = [
        Violation(
            f"dataset.features.{name}.role",
            dict(features[name]).get("role"),
            f"one of {list(ROLES)} (every feature has a role once one has)",
            f"dataset.features.{name}.role=input",
        )
        for name in unknown
    ]
    for role, fix in (("input", "role: input"), ("target", "role: target")):
        if not by_role[role]:
            found.append(
                Violation("dataset.features", sorted(features), f"at least one feature with {fix}", f"give one {fix}")
            )
    if len(by_role["weight"]) > 1:
        found.append(
            Violation(
                "dataset.features",
                by_role["weight"],
                "at most one feature with role: weight (each example's sample weight)",
                "keep one weight feature",
            )
        )
    raise_if_any(found)
    return by_role["input"], by_role["target"], (by_role["weight"] or [None])[0]


def _test_files(cfg) -> list[Path]:
    """dataset.test's shards (which must exist), else test-* beside the training shards when there are any."""
    if str(cfg.test):
        return _files("dataset.test", str(cfg.test))
    beside = Path(str(cfg.train)).expanduser().parent
    return sorted(beside.glob("test-*"))


def _files(key: str, pattern: str) -> list[Path]:
    files = sorted(Path(p) for p in glob.glob(str(Path(pattern).expanduser())))
    if not files:
        raise ConfigError.single(
            key,
            pattern,
            "a glob matching TFRecord shards (no file matches)",
            f"{key}=/data/my_set/{key.split('.')[-1]}-*.tfrecord (write shards with "
            "python -m launcher_datasets.to_tfrecord <data.npz | image folder> <out dir>)",
        )
    return files


def _metadata(folder: Path) -> dict:
    path = folder / METADATA
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError.single(
            "dataset.train",
            str(folder),
            f"a readable {METADATA} ({err})",
            f"re-write the shards with python -m launcher_datasets.to_tfrecord, or delete {path} "
            "and give dataset.features",
        ) from None


def _check_features(features: dict, x_key: str, y_key: str, folder: Path) -> None:
    if not features:
        raise ConfigError.single(
            "dataset.features",
            {},
            f"a feature spec (none given and no {METADATA} in {folder})",
            "dataset.features='{x: {shape: [8, 8, 1], dtype: float32}, y: {shape: [], dtype: int64}}'",
        )
    for key, name in (("dataset.x_key", x_key), ("dataset.y_key", y_key)):
        if name not in features and not _has_roles(features):
            raise ConfigError.single(key, name, f"one of the features {sorted(features)}", f"{key}=<feature name>")
    for name, spec in features.items():
        encoding, dtype = spec.get("encoding", "raw"), spec.get("dtype", "float32")
        if encoding not in ENCODINGS or dtype not in DTYPES or not isinstance(spec.get("shape", []), list | tuple):
            raise ConfigError.single(
                f"dataset.features.{name}",
                dict(spec),
                f"shape: [...], dtype: one of {list(DTYPES)}, encoding: one of {list(ENCODINGS)}",
                f"dataset.features.{name}={{shape: [8, 8, 1], dtype: float32, encoding: raw}}",
            )


def _counts(files: list[Path], metadata: dict, split: str) -> list[int]:
    """Examples per shard: from dataset.json when it lists these files, else counted (one pass)."""
    known = dict(
        zip(
            metadata.get("splits", {}).get(split, {}).get("files", []),
            metadata.get("splits", {}).get(split, {}).get("counts", []),
            strict=False,
        )
    )
    if all(f.name in known for f in files):
        return [int(known[f.name]) for f in files]
    import tensorflow as tf

    print(f"  dataset: counting the records of {len(files)} {split} shard(s) (no counts in {METADATA})", flush=True)
    return [int(tf.data.TFRecordDataset(str(f)).reduce(0, lambda n, _: n + 1)) for f in files]


def _parser(features: dict, inputs: list[str], targets: list[str], weight: str | None, named: bool):
    """Record -> (x, y) or (x, y, sample_weight): x a dict by name when `named`, y a dict when several targets."""
    import tensorflow as tf

    wanted = {name: features[name] for name in [*inputs, *targets, *([weight] if weight else [])]}
    spec = {name: _feature_spec(f) for name, f in wanted.items()}

    def parse(record):
        parsed = tf.io.parse_single_example(record, spec)
        decode = {n: _decode(wanted[n], parsed[n]) for n in parsed}
        x = {n: decode[n] for n in inputs} if named else decode[inputs[0]]
        y = {n: decode[n] for n in targets} if len(targets) > 1 else decode[targets[0]]
        if weight is None:
            return x, y
        return x, y, tf.reshape(tf.cast(decode[weight], tf.float32), [])

    return parse


def _feature_spec(f: dict):
    import tensorflow as tf

    if f.get("encoding") == "image":
        return tf.io.FixedLenFeature([], tf.string)
    return tf.io.FixedLenFeature([math.prod(f["shape"])], tf.int64 if _is_ids(f) else tf.float32)


def _is_ids(f: dict) -> bool:
    """A raw int64 feature, read as int32 ids (an image is decoded to floats whatever its dtype says)."""
    return f.get("encoding") != "image" and f.get("dtype", "float32") == "int64"


def _decode(f: dict, value):
    """A parsed feature as the model takes it: an image decoded, resized and scaled to [0, 1]; raw values reshaped
    (int64 as int32)."""
    import tensorflow as tf

    if f.get("encoding") == "image":
        height, width, channels = f["shape"]
        image = tf.io.decode_image(value, channels=channels, expand_animations=False)
        return tf.image.resize(image, (height, width)) / 255.0
    value = tf.reshape(value, f["shape"])
    return tf.cast(value, tf.int32) if _is_ids(f) else value


def _examples(features: dict, inputs: list[str], named: bool, files: list[Path]) -> Preprocessing:
    """The exports' second way in, `serving_examples(examples)`: serialized tf.Examples parsed and decoded inside
    the model as training read them (only the inputs are read: a client's records need no target)."""
    import tensorflow as tf

    spec = {name: _feature_spec(features[name]) for name in inputs}
    shapes = {
        name: tf.TensorSpec(features[name]["shape"], tf.int32 if _is_ids(features[name]) else tf.float32)
        for name in inputs
    }

    def decode(records) -> dict:
        def one(record):
            parsed = tf.io.parse_single_example(record, spec)
            return {name: _decode(features[name], parsed[name]) for name in inputs}

        decoded = tf.map_fn(one, records, fn_output_signature=shapes)
        return decoded if named else {"inputs": decoded[inputs[0]]}

    def records(count: int) -> list[bytes]:
        return [r.numpy() for r in tf.data.TFRecordDataset([str(f) for f in files]).take(count)]

    return Preprocessing(encoded=(Encoded("serving_examples", "examples", decode, records),))


def _reader(files: list[str], parse, cfg):
    """Shards interleaved in a fixed order (deterministic: a resumed epoch sees the same examples)."""
    import tensorflow as tf

    calls = tf.data.AUTOTUNE if cfg.parallel_calls < 1 else int(cfg.parallel_calls)
    ds = tf.data.Dataset.from_tensor_slices(files).interleave(
        tf.data.TFRecordDataset, cycle_length=min(len(files), 4), num_parallel_calls=calls, deterministic=True
    )
    ds = ds.map(parse, num_parallel_calls=calls, deterministic=True)
    return ds.cache() if cfg.cache else ds
