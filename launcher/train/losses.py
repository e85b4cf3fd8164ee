"""A task's loss, built from config: the task's own, or the person's function or keras.losses.Loss class (with or
without `reduction` in its signature), each with the keyword arguments its config entry gives
({name: my_project.losses:FocalLoss, gamma: 2.0}). Always per example: the engine reduces over the global batch.

The same concept one level up: `launcher.config.tasks` (the names, no TensorFlow); `launcher.train.tasks` calls the
loss on float32 outputs.
"""

from __future__ import annotations

import functools
import inspect

import keras
import tensorflow as tf

from launcher.config.errors import ConfigError
from launcher.config.imports import import_component
from launcher.config.raised import told
from launcher.config.tasks import component_args, loss_name, shown, users_loss_path


def make_loss(task: str, requested, key: str = "task.loss", from_logits: bool = True, binary: bool = False):
    """The loss `requested` names (a name, or {name: ..., <argument>: value}) as a per-example callable. The task's
    own take the model's outputs as they are (`from_logits`: logits; else probabilities, a softmax or sigmoid
    output); `binary`: a classification head of one unit, whose crossentropy is the sigmoid's."""
    name, args = loss_name(task, requested), component_args(requested)
    path = users_loss_path(name)
    try:
        if path is not None:
            return _user_loss(path, args, key)
        return _builtin_loss(name, args, from_logits, binary)
    except TypeError as err:
        raise ConfigError.single(
            key,
            shown(requested),
            f"arguments {name} takes ({err})",
            f"drop or rename the arguments, e.g. {key}={name}",
        ) from None


def _builtin_loss(name: str, args: dict, from_logits: bool, binary: bool):
    losses = keras.losses
    if name == "crossentropy" and not binary:
        return losses.SparseCategoricalCrossentropy(from_logits=from_logits, reduction=None, **args)
    if name in ("crossentropy", "binary_crossentropy"):
        if from_logits and not args:  # the fewest ops: what every logits model trained with so far
            return lambda y, logits: tf.reduce_mean(
                tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits), axis=-1
            )
        return losses.BinaryCrossentropy(from_logits=from_logits, reduction=None, **args)
    return {"mse": losses.MeanSquaredError, "mae": losses.MeanAbsoluteError, "huber": losses.Huber}[name](
        reduction=None, **args
    )


def _user_loss(path: str, args: dict, key: str):
    """A keras Loss class (instantiated with the arguments, left unreduced), or a function (y_true, y_pred) ->
    per-example values (its other arguments bound from config)."""
    found = import_component(key, path, "a function (y_true, y_pred) -> loss per example, or a keras Loss class")
    if isinstance(found, type) and issubclass(found, keras.losses.Loss):
        return _loss_object(found, path, args, key)
    if isinstance(found, keras.losses.Loss):
        if args:
            raise ConfigError.single(
                key,
                path,
                f"a Loss class or function to give the arguments {args} to (got an instance, already made)",
                f"name the class itself, e.g. {path.split(':')[0]}:{type(found).__name__}",
            )
        found.reduction = None
        return found
    if not callable(found):
        raise ConfigError.single(
            key,
            path,
            f"a callable loss (got {type(found).__name__})",
            f"point {key} at a function def my_loss(y_true, y_pred)",
        )
    try:
        inspect.signature(found).bind(None, None, **args)
    except (TypeError, ValueError) as err:
        raise ConfigError.single(
            key,
            shown({"name": path, **args}),
            f"a function taking (y_true, y_pred{''.join(f', {k}' for k in args)}) ({err})",
            "def my_loss(y_true, y_pred): return per-example values",
        ) from None
    return functools.partial(found, **args) if args else found


def _loss_object(cls, path: str, args: dict, key: str):
    """The class built with the arguments; `reduction=None` passed when its signature takes it, else set after
    (keras.io's `def __init__(self, gamma=2.0, name="focal")` has none), so it returns per-example values."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    takes_reduction = any(p.name == "reduction" or p.kind is p.VAR_KEYWORD for p in parameters)
    try:
        loss = cls(**args, reduction=None) if takes_reduction else cls(**args)
    except TypeError:
        raise
    except Exception as err:
        raise ConfigError.single(
            key,
            shown({"name": path, **args}),
            "a Loss class that builds (it raised the error below)",
            "fix the class or its arguments",
            detail=told(err, cls),
        ) from None
    loss.reduction = None
    return loss
