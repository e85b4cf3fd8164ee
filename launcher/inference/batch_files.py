"""`mode=predict eval.input=<folder or file>`: a folder of images, or TFRecord files, read a chunk at a time for the
signature that takes them.

Why apart from `launcher.inference.batch_inputs` (tables): these inputs are encoded bytes, and which signature decodes
them is the SavedModel's to say. Image files go to `serving_images` (their bytes, decoded and resized inside the
served function, as training did) when the SavedModel has it; otherwise each file is decoded here and resized to
`serving_default`'s height and width, cast to its dtype. TFRecord files go to `serving_examples` (serialized
tf.train.Example records, parsed inside); a SavedModel without it cannot be given records, and says so. A file
TensorFlow cannot decode is a `ConfigError` naming the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import tensorflow as tf

from launcher.config.errors import ConfigError, Violation
from launcher.inference.batch_inputs import (
    CHUNK_ROWS,
    TFRECORD_EXTENSIONS,
    BatchInput,
    Chunk,
    Spec,
    bad_input,
    first_line,
)
from launcher.train.preprocessing import IMAGE_EXTENSIONS

IMAGE_ROWS = 64  # images per call: a chunk of files is read, and decoded, at once
IMAGES, EXAMPLES = "serving_images", "serving_examples"


def image_files(folder: Path) -> list[str]:
    """The folder's image files (in sub-folders too), by their path relative to it, sorted."""
    return sorted(
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.suffix.lower() in IMAGE_EXTENSIONS and path.is_file()
    )


def open_images(folder: Path, specs: dict[str, dict[str, Spec]], rows: int = IMAGE_ROWS) -> BatchInput:
    """A folder of images for `serving_images` (the files' bytes) when `specs` (signature -> its inputs) has it,
    else for `serving_default`, decoded and resized here to its one image input."""
    files = image_files(folder)
    if IMAGES in specs:
        (name,) = specs[IMAGES]

        def encoded() -> Iterator[Chunk]:
            for start in range(0, len(files), rows):
                names = files[start : start + rows]
                data = np.array([(folder / n).read_bytes() for n in names], dtype=object)
                yield Chunk(pa.array(names, pa.string()), {name: data}, len(names))

        return BatchInput(folder, "images", IMAGES, "file", encoded(), len(files), "files")
    spec = _image_spec(folder, specs["serving_default"])

    def decoded() -> Iterator[Chunk]:
        for start in range(0, len(files), rows):
            names = files[start : start + rows]
            pixels = np.stack([decode_image(folder, n, spec) for n in names])
            yield Chunk(pa.array(names, pa.string()), {spec.name: pixels}, len(names))

    opened = BatchInput(folder, "images", "serving_default", "file", decoded(), len(files), "files")
    opened.notes.append(f"decoded and resized to {list(spec.shape)} here (the SavedModel has no {IMAGES})")
    return opened


def _image_spec(folder: Path, specs: dict[str, Spec]) -> Spec:
    (spec, *more) = specs.values()
    image = len(spec.shape) == 3 and None not in spec.shape[:2] and spec.shape[2] in (1, 3, 4)
    if more or not image or spec.dtype == object:
        takes = ", ".join(f"{s.name}: {s.describe()}" for s in specs.values())
        raise bad_input(
            folder,
            f"an input the run's SavedModel takes: its serving_default takes {takes}, not one image "
            f"[height, width, 1|3|4], and it has no {IMAGES} signature (image files' bytes)",
            "give the features as a .csv or .parquet table, or train on an image folder (dataset=image_folder)",
        )
    if spec.dtype != np.uint8:  # float pixels: scaled to [0, 1]? to [-1, 1]? A guess would be a silent wrong answer
        raise bad_input(
            folder,
            f"a SavedModel that takes image files ({IMAGES}) or uint8 pixels; its serving_default takes "
            f"{spec.name}: {spec.describe()}, pixels on a scale only its data pipeline knew",
            "predict a table of the pixels as the model takes them (.parquet), or train with dataset=image_folder "
            "(its exports take image files)",
        )
    return spec


def decode_image(folder: Path, name: str, spec: Spec) -> np.ndarray:
    """One image file as the input `spec` takes: decoded (JPEG, PNG, BMP, GIF), resized bilinearly to its height
    and width, in its dtype (integers rounded and clipped to the dtype's range)."""
    height, width, channels = spec.shape
    try:
        image = tf.io.decode_image((folder / name).read_bytes(), channels=channels, expand_animations=False)
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as err:
        raise _undecodable(folder, name, err) from None
    resized = tf.image.resize(image, (height, width))
    if spec.dtype.kind in "iu":
        info = np.iinfo(spec.dtype)
        resized = tf.clip_by_value(tf.round(resized), float(info.min), float(info.max))
    return tf.cast(resized, tf.as_dtype(spec.dtype)).numpy()


def _undecodable(folder: Path, name: str, err: Exception) -> ConfigError:
    return ConfigError(
        [
            Violation(
                "eval.input",
                str(folder),
                f"image files TensorFlow decodes (JPEG, PNG, BMP, GIF); {name} is not one ({first_line(err)})",
                f"remove or re-encode {folder / name}",
            )
        ]
    )


def find_undecodable(folder: Path, names: list[str]) -> ConfigError | None:
    """The first of `names` TensorFlow cannot decode, as the error naming it (None: each decodes alone)."""
    for name in names:
        try:
            tf.io.decode_image((folder / name).read_bytes(), expand_animations=False)
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as err:
            return _undecodable(folder, name, err)
    return None


def tfrecord_files(path: Path) -> list[Path]:
    """A TFRecord file, or a folder's (in sub-folders too), sorted by name."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and _is_tfrecord(p.name.lower()))


def _is_tfrecord(name: str) -> bool:
    return Path(name.removesuffix(".gz")).suffix in TFRECORD_EXTENSIONS


def open_tfrecord(path: Path, specs: dict[str, dict[str, Spec]], rows: int = CHUNK_ROWS) -> BatchInput:
    """TFRecord files (GZIP when named .gz) for `serving_examples`: their records as they are, `rows` at a time,
    numbered across the files in name order; a SavedModel without that signature is refused."""
    if EXAMPLES not in specs:
        raise bad_input(
            path,
            f"an input the run's SavedModel takes: it has no {EXAMPLES} signature (serialized tf.train.Example "
            f"records), only {', '.join(sorted(specs))}",
            "give the features as a .csv or .parquet table (columns named like the model's inputs), or train on "
            "TFRecord data (dataset=tfrecord): its exports parse tf.Examples",
        )
    (name,) = specs[EXAMPLES]
    files = tfrecord_files(path)

    def chunks() -> Iterator[Chunk]:
        start = 0
        for file in files:
            compression = "GZIP" if file.name.lower().endswith(".gz") else ""
            records = iter(tf.data.TFRecordDataset(str(file), compression_type=compression).batch(rows))
            while True:
                try:
                    batch = next(records).numpy()
                except StopIteration:
                    break
                except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:
                    raise bad_input(
                        path,
                        f"TFRecord files; {file.name} is not one, or is damaged after record {start} "
                        f"({first_line(err)})",
                        f"remove {file}, or write it again (GZIP-compressed files end in .gz)",
                    ) from None
                ids = pa.array(np.arange(start, start + len(batch), dtype=np.int64))
                yield Chunk(ids, {name: batch.astype(object)}, len(batch), origin=file.name)
                start += len(batch)

    return BatchInput(path, "tfrecord", EXAMPLES, "record", chunks(), None, "records")
