"""Convert an .npz file or an image folder into TFRecord shards for `dataset=tfrecord`.

    python -m launcher_datasets.to_tfrecord data.npz out/ --shards 8
    python -m launcher_datasets.to_tfrecord images/ out/ --shards 8 --image-size 64 64
    python -m launcher_datasets.to_tfrecord data.npz out/ --inputs age dose --targets kind size --weight w

Writes `train-0000i-of-0000n.tfrecord` and `val-*.tfrecord` (and `test-*.tfrecord` with --test-split; a
seeded split, as the in-memory datasets make it) and `dataset.json`: the feature spec, the kind, the number of
classes and the examples in every shard. With --inputs/--targets (arrays of the .npz by name, and an optional
--weight) every array is a feature with its role: the model's named inputs, its heads and the sample weight.
Images keep their encoded bytes (decoded in the tf.data pipeline); arrays are stored flat.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from launcher.config.errors import ConfigError
from launcher.train.data import held_out

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif"}


def convert(
    source: Path,
    out: Path,
    shards: int,
    validation_split: float = 0.2,
    seed: int = 0,
    image_size: tuple[int, int] = (32, 32),
    channels: int = 3,
    test_split: float = 0.0,
    roles: dict[str, list[str]] | None = None,
) -> dict:
    """Write the shards and dataset.json; returns the metadata. `roles` names the .npz's arrays by role (input,
    target, weight) for several named inputs and heads."""
    if source.is_dir():
        examples, features, kind, num_classes = _image_folder(source, image_size, channels)
    elif source.suffix == ".npz" and source.is_file() and roles:
        examples, features, kind, num_classes = _npz_named(source, roles)
    elif source.suffix == ".npz" and source.is_file():
        examples, features, kind, num_classes = _npz(source)
    else:
        raise ConfigError.single(
            "source",
            str(source),
            "an existing .npz file or a folder of class sub-folders",
            "python -m launcher_datasets.to_tfrecord data.npz out/",
        )
    order = np.random.default_rng(seed).permutation(len(examples))
    num_val, num_test = held_out(len(order), validation_split, test_split)  # as the in-memory datasets hold out
    end = len(order) - num_val - num_test
    out.mkdir(parents=True, exist_ok=True)
    splits = {}
    parts = (("train", order[:end]), ("val", order[-num_val:]), ("test", order[end : end + num_test]))
    for split, indices in (part for part in parts if len(part[1])):
        count = min(shards, len(indices)) if split == "train" else max(1, min(shards // 4, len(indices)))
        splits[split] = _write(out, split, [examples[i] for i in indices], count)
    metadata = {"features": features, "kind": kind, "num_classes": num_classes, "splits": splits, "source": str(source)}
    (out / "dataset.json").write_text(json.dumps(metadata, indent=2))
    return metadata


def _npz(path: Path):
    with np.load(path) as archive:
        x, y = archive["x"], archive["y"].astype("int64").reshape(-1)
    integer = np.issubdtype(x.dtype, np.integer)
    dtype = "int64" if integer else "float32"
    x = x.astype(dtype)
    kind = "tokens" if integer and x.ndim == 2 else ("image" if x.ndim == 4 else "tabular")
    features = {
        "x": {"shape": list(x.shape[1:]), "dtype": dtype, "encoding": "raw"},
        "y": {"shape": [], "dtype": "int64", "encoding": "raw"},
    }
    return [(xi, int(yi)) for xi, yi in zip(x, y, strict=True)], features, kind, int(y.max()) + 1


def _npz_named(path: Path, roles: dict[str, list[str]]):
    """Arrays of the .npz by role: every one a raw feature (float32, or int64 for integers) with its role."""
    if not (roles.get("input") and roles.get("target")):
        raise ConfigError.single(
            "--inputs/--targets",
            roles,
            "both: the model's input arrays and its target arrays",
            "--inputs a --targets y",
        )
    with np.load(path) as archive:
        missing = [n for names in roles.values() for n in names if n not in archive.files]
        if missing:
            raise ConfigError.single(
                "--inputs/--targets/--weight", missing, f"arrays of {path} (it has {archive.files})", "name those"
            )
        arrays = {n: archive[n] for names in roles.values() for n in names}
    arrays = {n: a.astype("int64" if np.issubdtype(a.dtype, np.integer) else "float32") for n, a in arrays.items()}
    features = {
        n: {"shape": list(arrays[n].shape[1:]), "dtype": str(arrays[n].dtype), "encoding": "raw", "role": role}
        for role, names in roles.items()
        for n in names
    }
    count = len(next(iter(arrays.values())))
    examples = [{n: a[i] for n, a in arrays.items()} for i in range(count)]
    return examples, features, "tabular", 0


def _image_folder(root: Path, size: tuple[int, int], channels: int):
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    examples = [
        (path.read_bytes(), label)
        for label, name in enumerate(classes)
        for path in sorted((root / name).iterdir())
        if path.suffix.lower() in IMAGE_SUFFIXES
    ]
    features = {
        "x": {"shape": [*size, channels], "dtype": "float32", "encoding": "image"},
        "y": {"shape": [], "dtype": "int64", "encoding": "raw"},
    }
    return examples, features, "image", len(classes)


def _write(out: Path, split: str, examples: list, shards: int) -> dict:
    import tensorflow as tf

    names, counts = [], []
    for shard, part in enumerate(np.array_split(np.arange(len(examples)), shards)):
        name = f"{split}-{shard:05d}-of-{shards:05d}.tfrecord"
        with tf.io.TFRecordWriter(str(out / name)) as writer:
            for index in part:
                example = examples[index]
                record = _named_example(example) if isinstance(example, dict) else _example(*example)
                writer.write(record.SerializeToString())
        names.append(name)
        counts.append(len(part))
    return {"files": names, "counts": counts}


def _example(x, y: int):
    import tensorflow as tf

    if isinstance(x, bytes):
        feature_x = tf.train.Feature(bytes_list=tf.train.BytesList(value=[x]))
    elif np.issubdtype(x.dtype, np.integer):
        feature_x = tf.train.Feature(int64_list=tf.train.Int64List(value=x.reshape(-1)))
    else:
        feature_x = tf.train.Feature(float_list=tf.train.FloatList(value=x.reshape(-1)))
    label = tf.train.Feature(int64_list=tf.train.Int64List(value=[y]))
    return tf.train.Example(features=tf.train.Features(feature={"x": feature_x, "y": label}))


def _named_example(values: dict):
    """One example of named raw arrays, each stored flat."""
    import tensorflow as tf

    def feature(value):
        value = np.asarray(value).reshape(-1)
        if np.issubdtype(value.dtype, np.integer):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=value))
        return tf.train.Feature(float_list=tf.train.FloatList(value=value))

    return tf.train.Example(features=tf.train.Features(feature={n: feature(v) for n, v in values.items()}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m launcher_datasets.to_tfrecord",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("source", type=Path, help="an .npz file (arrays x, y) or a folder of class sub-folders")
    parser.add_argument("out", type=Path, help="folder for the shards and dataset.json")
    parser.add_argument("--shards", type=int, default=8, help="training shards (validation: a quarter)")
    parser.add_argument("--validation-split", type=float, default=0.2)
    parser.add_argument("--test-split", type=float, default=0.0, help="fraction written as test-* shards")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--image-size", type=int, nargs=2, default=(32, 32), metavar=("H", "W"))
    parser.add_argument("--channels", type=int, default=3, choices=(1, 3, 4))
    parser.add_argument("--inputs", nargs="+", default=[], help=".npz arrays that are the model's named inputs")
    parser.add_argument("--targets", nargs="+", default=[], help=".npz arrays that are its targets, one per head")
    parser.add_argument("--weight", default="", help=".npz array of each example's sample weight")
    args = parser.parse_args(argv)
    roles = {"input": args.inputs, "target": args.targets, "weight": [args.weight] if args.weight else []}
    try:
        meta = convert(
            args.source,
            args.out,
            args.shards,
            args.validation_split,
            args.seed,
            tuple(args.image_size),
            args.channels,
            args.test_split,
            roles if args.inputs or args.targets else None,
        )
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 2
    train = meta["splits"]["train"]
    print(
        f"{sum(train['counts'])} training examples in {len(train['files'])} shards, "
        f"{sum(meta['splits']['val']['counts'])} validation examples"
        + (f", {sum(meta['splits']['test']['counts'])} test examples" if "test" in meta["splits"] else "")
        + "; train with:\n"
        f"  python -m launcher dataset=tfrecord dataset.train={args.out}/train-*.tfrecord"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
