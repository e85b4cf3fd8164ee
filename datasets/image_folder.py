"""A folder with one sub-folder of images per class (keras.utils.image_dataset_from_directory)."""

from __future__ import annotations

from pathlib import Path

from launcher.config.errors import ConfigError, raise_if_any
from launcher.train.data import DataSource
from launcher.train.data_checks import image_folder_problems, split_problems

COLOR_MODES = {"rgb": 3, "grayscale": 1, "rgba": 4}


def load(cfg) -> DataSource:
    import keras

    root = Path(str(cfg.path)).expanduser()
    classes = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if len(classes) < 2:
        raise ConfigError.single(
            "dataset.path",
            str(cfg.path),
            "a directory with one sub-directory of images per class (at least 2 classes)",
            "dataset.path=/data/my_images with my_images/<class_name>/*.png",
        )
    if cfg.color_mode not in COLOR_MODES:
        raise ConfigError.single(
            "dataset.color_mode", cfg.color_mode, f"one of {list(COLOR_MODES)}", "dataset.color_mode=rgb"
        )
    raise_if_any(image_folder_problems(root, classes))
    train, val = keras.utils.image_dataset_from_directory(
        str(root),
        validation_split=cfg.validation_split,
        subset="both",
        seed=cfg.shuffle_seed,
        image_size=tuple(cfg.image_size),
        color_mode=cfg.color_mode,
        batch_size=None,
        shuffle=True,
    )
    rescale = lambda x, y: (x / 255.0, y)  # noqa: E731
    num_train, num_val = int(train.cardinality()), int(val.cardinality())
    raise_if_any(split_problems(num_train, num_val, cfg.validation_split, str(root)))
    if cfg.limit:
        train, num_train = train.take(cfg.limit), min(num_train, cfg.limit)
    return DataSource(
        train=train.map(rescale),
        val=val.map(rescale),
        num_train=num_train,
        num_val=num_val,
        input_shape=(*cfg.image_size, COLOR_MODES[cfg.color_mode]),
        num_classes=len(classes),
        kind="image",
    )
