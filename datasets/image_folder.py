"""A folder with one sub-folder of images per class (keras.utils.image_dataset_from_directory): the sub-folders
name the classes, and every export takes encoded images or uint8 pixels (`launcher.train.preprocessing`)."""

from __future__ import annotations

from pathlib import Path

from launcher.config.errors import ConfigError, raise_if_any
from launcher.train.data import DataSource
from launcher.train.data_checks import image_folder_problems, split_problems, streamed_test_split
from launcher.train.preprocessing import image_files, image_preprocessing

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
    streamed_test_split(cfg, "dataset.test_path=<a folder of the same class sub-folders>")
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
    num_train, num_val = int(train.cardinality()), int(val.cardinality())
    raise_if_any(split_problems(num_train, num_val, cfg.validation_split, str(root)))
    if cfg.limit:
        train, num_train = train.take(cfg.limit), min(num_train, cfg.limit)
    test = _test_folder(cfg, classes) if str(cfg.test_path) else None
    height, width = cfg.image_size
    channels = COLOR_MODES[cfg.color_mode]
    return DataSource(
        train=train,
        val=val,
        num_train=num_train,
        num_val=num_val,
        input_shape=(height, width, channels),
        num_classes=len(classes),
        kind="image",
        test=test,
        num_test=int(test.cardinality()) if test is not None else 0,
        # Decoded and resized here (0-255 pixels), scaled to [0, 1] on every batch and inside every export.
        preprocessing=image_preprocessing(height, width, channels, lambda: image_files(root, classes)),
        class_names=tuple(classes),
    )


def _test_folder(cfg, classes: list[str]):
    """dataset.test_path: the same classes in the same layout, read in file order."""
    import keras

    root = Path(str(cfg.test_path)).expanduser()
    found = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if found != classes:
        raise ConfigError.single(
            "dataset.test_path",
            str(cfg.test_path),
            f"a folder with the training classes as sub-folders {classes} (found {found or 'none'})",
            f"dataset.test_path=/data/my_test_images with <class_name>/*.png for each of {classes}",
        )
    raise_if_any(image_folder_problems(root, classes))
    return keras.utils.image_dataset_from_directory(
        str(root),
        class_names=classes,
        image_size=tuple(cfg.image_size),
        color_mode=cfg.color_mode,
        batch_size=None,
        shuffle=False,
    )
