"""The dataset's labels against the task, before anything is built: what they must be, and the fix.

A mismatch would otherwise surface minutes later as a TensorFlow shape or dtype error (float targets
fed to a softmax, a label >= the number of classes read as an out-of-range gather on CPU or garbage on
GPU). Arrays are checked whole; a tf.data split by its first `SAMPLE` examples.
"""

from __future__ import annotations

import numpy as np

from launcher.config.errors import ConfigError, Violation, raise_if_any
from launcher.train.data import DataSource

SAMPLE = 2048
SHOWN = 3


def fit_to_task(source: DataSource, task: str, num_classes: int = 0, pad_id: int = 0) -> DataSource:
    """Check the labels (and for sequences the inputs) fit `task`; set the source's task and output width.

    `num_classes` is the configured count (0 = from the data). Raises ConfigError listing every problem.
    """
    x, y = _sample(source)
    problems = CHECKS[task](source, x, y, num_classes)
    raise_if_any(problems)
    source.task = task
    if task == "classification":
        source.num_classes = num_classes or max(source.num_classes, int(y.max()) + 1 if y.size else 0)
        _cast(source, "int32", flat=True)
    elif task == "multilabel":
        source.num_classes = y.shape[1]
        _cast(source, "float32")
    elif task == "regression":
        source.num_outputs = 1 if y.ndim == 1 else int(np.prod(y.shape[1:]))
        source.num_classes = source.num_outputs
        _cast(source, "float32")
    else:
        source.vocab_size = max(source.vocab_size, int(x.max()) + 1, int(y.max()) + 1, pad_id + 1)
        source.num_outputs = source.vocab_size
        source.num_classes = source.vocab_size
        _cast(source, "int32")
    return source


def _classification(source, x, y, num_classes) -> list[Violation]:
    if y.dtype.kind == "f":
        sample = ", ".join(f"{v:g}" for v in np.unique(y.reshape(-1))[:SHOWN])
        return [
            Violation(
                "task.name",
                "classification",
                f"integer class ids as labels (the dataset's are {y.dtype}, e.g. {sample})",
                "task=regression for real-valued targets, or give integer class ids (y.astype('int64')) for classes",
            )
        ]
    if y.dtype.kind not in "iub":
        return [
            Violation(
                "task.name",
                "classification",
                f"integer class ids as labels (got dtype {y.dtype})",
                "map the labels to ids 0..K-1: names, y = np.unique(y, return_inverse=True)",
            )
        ]
    if y.ndim > 1 and int(np.prod(y.shape[1:])) > 1:
        return [
            Violation(
                "task.name",
                "classification",
                f"one class id per example (labels have shape {tuple(y.shape)}: one-hot or several labels each?)",
                "task=multilabel for several 0/1 labels per example, or y.argmax(axis=1) for one-hot",
            )
        ]
    if not y.size:
        return []
    low, high = int(y.min()), int(y.max())
    if low < 0:
        return [
            Violation(
                "task.name",
                "classification",
                f"class ids >= 0 (smallest label is {low})",
                "re-map the labels: names, y = np.unique(y, return_inverse=True)",
            )
        ]
    classes = num_classes or source.num_classes
    if classes and high >= classes:
        return [
            Violation(
                "dataset.num_classes",
                classes,
                f"more classes than the largest label ({high}; ids run 0..num_classes-1)",
                f"dataset.num_classes={high + 1}, or 0 to count them from the labels",
            )
        ]
    return []


def _multilabel(source, x, y, num_classes) -> list[Violation]:
    if y.ndim != 2:
        return [
            Violation(
                "task.name",
                "multilabel",
                f"a row of 0/1 labels per example, shape (N, labels) (got shape {tuple(y.shape)})",
                "task=classification for one class id per example, or give y as "
                "a 0/1 matrix (e.g. keras.utils.to_categorical for one id)",
            )
        ]
    values = np.unique(y)
    if not np.isin(values, (0, 1)).all():
        odd = ", ".join(f"{v:g}" for v in values[~np.isin(values, (0, 1))][:SHOWN])
        return [
            Violation(
                "task.name",
                "multilabel",
                f"labels that are 0 or 1 (found {odd})",
                "threshold or binarise the labels, e.g. (y > 0).astype('float32')",
            )
        ]
    if num_classes and num_classes != y.shape[1]:
        return [
            Violation(
                "dataset.num_classes",
                num_classes,
                f"the {y.shape[1]} labels per example the data has",
                f"dataset.num_classes={y.shape[1]} (or 0)",
            )
        ]
    return []


def _regression(source, x, y, num_classes) -> list[Violation]:
    if y.dtype.kind not in "fiub":
        return [
            Violation(
                "task.name", "regression", f"numeric targets (got dtype {y.dtype})", "convert the targets to floats"
            )
        ]
    if y.dtype.kind == "f" and not np.isfinite(y).all():
        return [
            Violation(
                "task.name",
                "regression",
                "finite targets (found NaN or inf)",
                "drop or impute the examples without a target",
            )
        ]
    return []


def _sequence(source, x, y, num_classes) -> list[Violation]:
    if source.kind != "tokens" or x.dtype.kind not in "iu":
        return [
            Violation(
                "task.name",
                "sequence",
                f"token id inputs (the dataset gives {source.kind} inputs of {x.dtype})",
                "dataset=synthetic dataset.kind=tokens, or a dataset of integer token ids",
            )
        ]
    if y.shape[1:] != x.shape[1:] or y.dtype.kind not in "iu":
        return [
            Violation(
                "task.name",
                "sequence",
                f"the next token id at every position: integer labels shaped like "
                f"the inputs {tuple(x.shape[1:])} (got {y.dtype} labels of shape {tuple(y.shape[1:])})",
                "give y = tokens[:, 1:] for x = tokens[:, :-1] (pad both with task.pad_id)",
            )
        ]
    if y.size and int(y.min()) < 0:
        return [
            Violation(
                "task.name",
                "sequence",
                f"token ids >= 0 (smallest label is {int(y.min())})",
                "re-map the ids to 0..vocab-1",
            )
        ]
    return []


CHECKS = {
    "classification": _classification,
    "multilabel": _multilabel,
    "regression": _regression,
    "sequence": _sequence,
}


def _sample(source: DataSource) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and labels of every split (arrays whole, tf.data splits by their first SAMPLE examples)."""
    xs, ys = [], []
    for split in (source.split(name) for name in source.splits):
        if isinstance(split, tuple):
            xs.append(np.asarray(split[0][:SAMPLE]))
            ys.append(np.asarray(split[1]))
        else:
            for x, y in split.take(SAMPLE).batch(SAMPLE):
                xs.append(x.numpy())
                ys.append(y.numpy())
    try:
        return np.concatenate(xs), np.concatenate(ys)
    except ValueError as err:
        raise ConfigError.single(
            "dataset",
            "(loaded)",
            f"train, val (and test) examples of one shape ({err})",
            "give every split the same input and label shapes",
        ) from None


def _cast(source: DataSource, dtype: str, flat: bool = False) -> None:
    """Labels in the dtype the task's loss takes (class ids flat), in every split."""
    import tensorflow as tf

    def cast_array(y):
        y = np.asarray(y).astype(dtype)
        return y.reshape(len(y)) if flat else y

    for name in source.splits:
        split = getattr(source, name)
        if isinstance(split, tuple):
            setattr(source, name, (split[0], cast_array(split[1])))
        else:
            if flat:
                setattr(source, name, split.map(lambda x, y: (x, tf.reshape(tf.cast(y, dtype), []))))
            else:
                setattr(source, name, split.map(lambda x, y: (x, tf.cast(y, dtype))))
    source._base.clear()
