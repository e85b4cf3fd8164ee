"""The dataset's labels against the task, before anything is built: what they must be, and the fix.

A mismatch would otherwise surface minutes later as a TensorFlow shape or dtype error (float targets
fed to a softmax, a label >= the number of classes read as an out-of-range gather on CPU or garbage on
GPU). Arrays are checked whole; a tf.data split by its first `SAMPLE` examples.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from launcher.config.errors import ConfigError, Violation, raise_if_any
from launcher.train.data import DataSource, first_array, map_arrays
from launcher.train.data_checks import weight_problems

SAMPLE = 2048
SHOWN = 3


def fit_to_task(
    source: DataSource, task: str, num_classes: int = 0, pad_id: int = 0, heads: dict[str, str] | None = None
) -> DataSource:
    """Check the labels (and for sequences the inputs) fit `task`; set the source's task and output width.

    `num_classes` is the configured count (0 = from the data). With a target per head (a dict y), each head's
    labels are checked against its own task, `heads` mapping output name -> task name; without `heads` every head
    takes `task`. Raises ConfigError listing every
    problem, naming the head.
    """
    x, y, weights = _sample(source)
    features = x if not isinstance(x, dict | tuple) else first_array(x)
    problems = weight_problems(weights, len(weights), "the examples read", "dataset", "sample_weight")
    if isinstance(y, dict):
        return _fit_heads(source, task, features, y, problems, pad_id, heads)
    problems += CHECKS[task](source, features, y, num_classes)
    raise_if_any(problems)
    source.task = task
    if task == "classification":
        source.num_classes = num_classes or max(source.num_classes, int(y.max()) + 1 if y.size else 0)
    elif task == "multilabel":
        source.num_classes = y.shape[1]
    elif task == "regression":
        source.num_outputs = 1 if y.ndim == 1 else int(np.prod(y.shape[1:]))
        source.num_classes = source.num_outputs
    else:
        source.vocab_size = max(source.vocab_size, int(features.max()) + 1, int(y.max()) + 1, pad_id + 1)
        source.num_outputs = source.vocab_size
        source.num_classes = source.vocab_size
    _cast(source, {None: LABEL_DTYPES[task]})
    return source


# The dtype each task's loss takes its labels in, and whether class ids are flat (one per example).
LABEL_DTYPES = {
    "classification": ("int32", True),
    "multilabel": ("float32", False),
    "regression": ("float32", False),
    "sequence": ("int32", False),
}


def _fit_heads(source, task, features, y: dict, problems: list, pad_id: int, heads) -> DataSource:
    """A target per head: each head's labels against its task (named in every problem), then each head's output
    width in `source.head_outputs` and its task in `source.head_tasks` (the first head's width is the source's
    num_classes / num_outputs, for what reads one)."""
    configured = dict(heads or {})
    tasks = {}
    for name in y:
        if configured and name not in configured:
            problems.append(
                Violation(
                    "task.heads",
                    name,
                    f"a task for every head the data has a target for (task.heads names {_listed(configured)}; "
                    f"y also has {name!r})",
                    f"add task.heads.{name}: {{name: classification}} (or regression, multilabel), or drop "
                    f"{name!r} from y",
                )
            )
            continue
        tasks[name] = configured.get(name, task)
        found = CHECKS[tasks[name]](source, features, y[name], 0)
        problems += [_for_head(v, name, bool(configured)) for v in found]
    raise_if_any(problems)
    source.task = task
    source.head_tasks = tasks
    source.head_outputs = {name: _width(tasks[name], features, y[name], source, pad_id) for name in tasks}
    first = source.head_outputs[next(iter(tasks))] if tasks else 0
    source.num_classes, source.num_outputs = first, first
    _cast(source, {name: LABEL_DTYPES[head_task] for name, head_task in tasks.items()})
    return source


def _width(task: str, x: np.ndarray, y: np.ndarray, source: DataSource, pad_id: int) -> int:
    """A head's output layer width: classes, labels, targets or the vocabulary."""
    if task == "classification":
        return int(y.max()) + 1 if y.size else 0
    if task == "multilabel":
        return int(y.shape[1])
    if task == "regression":
        return 1 if y.ndim == 1 else int(np.prod(y.shape[1:]))
    return max(source.vocab_size, int(x.max()) + 1, int(y.max()) + 1, pad_id + 1)


def _for_head(violation: Violation, head: str, configured: bool) -> Violation:
    """A label problem of one head: its key the head's task (when task.heads names it), its message the head's."""
    key, fix = violation.key, violation.fix
    if configured and key == "task.name":
        key, fix = f"task.heads.{head}.name", fix.replace("task=", f"task.heads.{head}.name=")
    return replace(violation, key=key, expected=f"head {head!r}: {violation.expected}", fix=fix)


def _listed(names) -> str:
    return ", ".join(repr(n) for n in names) or "none"


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


def _sample(source: DataSource) -> tuple:
    """Inputs, labels and sample weights of every split (arrays whole, tf.data splits by their first SAMPLE
    examples), each in the structure the split holds (features and labels by name when named)."""
    xs, ys, ws = [], [], []
    for split in (source.split(name) for name in source.splits):
        if isinstance(split, tuple):
            xs.append(map_arrays(lambda a: np.asarray(a[:SAMPLE]), split[0]))
            ys.append(map_arrays(np.asarray, split[1]))
            ws += [np.asarray(split[2], "float32").reshape(-1)] if len(split) == 3 else []
        else:
            for element in split.take(SAMPLE).batch(SAMPLE):
                xs.append(map_arrays(lambda t: t.numpy(), element[0]))
                ys.append(map_arrays(lambda t: t.numpy(), element[1]))
                ws += [element[2].numpy().reshape(-1)] if len(element) == 3 else []
    try:
        return _joined(xs), _joined(ys), np.concatenate(ws) if ws else np.zeros(0, "float32")
    except (ValueError, KeyError, TypeError) as err:
        raise ConfigError.single(
            "dataset",
            "(loaded)",
            f"train, val (and test) examples of one shape ({err})",
            "give every split the same input and label shapes",
        ) from None


def _joined(trees: list):
    """The splits' arrays joined per feature or head."""
    first = trees[0]
    if isinstance(first, dict):
        return {name: np.concatenate([tree[name] for tree in trees]) for name in first}
    if isinstance(first, tuple):
        return tuple(np.concatenate([tree[i] for tree in trees]) for i in range(len(first)))
    return np.concatenate(trees)


def _cast(source: DataSource, dtypes: dict) -> None:
    """Labels in the dtype each head's loss takes (class ids flat), weights float32, in every split. `dtypes` maps
    a head's name (None for one target) to (dtype, flat)."""
    for name in source.splits:
        split = getattr(source, name)
        if isinstance(split, tuple):
            weights = (np.asarray(split[2], "float32").reshape(-1),) if len(split) == 3 else ()
            setattr(source, name, (split[0], _labels_as(split[1], dtypes, _cast_array), *weights))
        else:
            setattr(source, name, split.map(lambda *element: _element_as(element, dtypes)))
    source._base.clear()


def _element_as(element: tuple, dtypes: dict) -> tuple:
    """One tf.data example with its labels cast (and its weight a float32 scalar)."""
    import tensorflow as tf

    weights = (tf.reshape(tf.cast(element[2], "float32"), []),) if len(element) == 3 else ()
    return (element[0], _labels_as(element[1], dtypes, _cast_tensor), *weights)


def _labels_as(y, dtypes: dict, cast):
    if isinstance(y, dict):
        return {name: cast(value, *dtypes[name]) for name, value in y.items()}
    return cast(y, *dtypes[None])


def _cast_array(y, dtype: str, flat: bool):
    y = np.asarray(y).astype(dtype)
    return y.reshape(len(y)) if flat else y


def _cast_tensor(y, dtype: str, flat: bool):
    import tensorflow as tf

    y = tf.cast(y, dtype)
    return tf.reshape(y, []) if flat else y
