"""Does moving an image folder's scaling into the exported preprocessing slow training's input pipeline?

Side by side in one process, interleaved: the pipeline as it was (each example scaled by a per-example map before
batching) and as it is (`DataSource.pipeline`: batches scaled by the preprocessing every export carries). Prints
batches per second of each, every repetition, and the ratio of medians.

    .venv/bin/python benchmarks/preprocessing_cost.py --images 2000 --size 64 --reps 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def make_folder(root: Path, images: int, size: int) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    for index in range(images):
        folder = root / f"class_{index % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, size=(size, size, 3), dtype=np.uint8)).save(folder / f"{index}.png")
    return root


def rate(ds, batches: int) -> float:
    start = time.perf_counter()
    for _ in ds.take(batches):
        pass
    return batches / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()

    from launcher_datasets import image_folder
    from omegaconf import OmegaConf

    from launcher.config.datasets import ImageFolderConfig

    with tempfile.TemporaryDirectory() as tmp:
        root = make_folder(Path(tmp), args.images, args.size)
        cfg = OmegaConf.structured(ImageFolderConfig(path=str(root), image_size=[args.size, args.size]))
        source = image_folder.load(cfg)
        source.train = source.train.cache()  # decode once: what is timed is the scaling and batching
        batches = source.num_train // args.batch
        was = source.train.map(lambda x, y: (x / 255.0, y)).batch(args.batch, drop_remainder=True)
        now = source.pipeline("train", args.batch, True, None)
        rate(was, batches), rate(now, batches)  # warm the cache and both graphs
        samples = {"per-example map (before)": [], "per-batch preprocessing (now)": []}
        for _ in range(args.reps):
            samples["per-example map (before)"].append(rate(was, batches))
            samples["per-batch preprocessing (now)"].append(rate(now, batches))
        for name, values in samples.items():
            print(f"{name:<32} batches/s median {statistics.median(values):8.1f}  samples {[round(v) for v in values]}")
        ratio = statistics.median(samples["per-batch preprocessing (now)"]) / statistics.median(
            samples["per-example map (before)"]
        )
        print(f"now / before: {ratio:.2f}x ({args.images} images {args.size}x{args.size}, batch {args.batch})")


if __name__ == "__main__":
    main()
