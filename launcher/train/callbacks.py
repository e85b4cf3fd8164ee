"""Keras callbacks from the `train` config, standard and the user's own (the engine drives them)."""

from __future__ import annotations

import keras

from launcher.config.errors import ConfigError, raise_if_any
from launcher.config.imports import callback_problems, component_path, import_component
from launcher.config.raised import told

# The callbacks a validation inside an epoch (train.val_every_steps) drives, as an epoch end drives them.
VALIDATION_CALLBACKS = (keras.callbacks.EarlyStopping, keras.callbacks.ReduceLROnPlateau)


def make_callbacks(train) -> list:
    """The Keras callbacks the engine drives: early stopping and LR on plateau when enabled, then the person's.

    Args:
        train: the config's `train` section (its `early_stopping`, `reduce_lr_on_plateau` and `callbacks`).

    Returns:
        A list of `keras.callbacks.Callback`, in that order.
    """
    callbacks = []  # non-finite losses: the engine's NumericsGuard (train.on_nonfinite), not TerminateOnNaN
    es = train.early_stopping
    if es.enabled:
        callbacks.append(
            keras.callbacks.EarlyStopping(monitor=es.monitor, patience=es.patience, mode=es.mode.value, verbose=1)
        )
    rl = train.reduce_lr_on_plateau
    if rl.enabled:
        callbacks.append(
            keras.callbacks.ReduceLROnPlateau(
                monitor=rl.monitor, factor=rl.factor, patience=rl.patience, mode=rl.mode.value, verbose=1
            )
        )
    return callbacks + [user_callback(path) for path in train.callbacks]


def user_callback(name: str):
    """The person's callback named in `train.callbacks`, made with no arguments.

    Args:
        name: `module.path:Name`, or an installed plugin's name (entry point group launcher.callbacks), naming a
            keras.callbacks.Callback class, a function returning one, or a Callback instance.

    Returns:
        The keras.callbacks.Callback; a ConfigError naming `train.callbacks` when it cannot be had.
    """
    raise_if_any(callback_problems([name]))
    path = component_path("callback", name)
    found = import_component("train.callbacks", path, "a keras.callbacks.Callback class or a function returning one")
    if isinstance(found, keras.callbacks.Callback):
        return found
    if not callable(found):
        raise ConfigError.single(
            "train.callbacks",
            path,
            f"a Callback class or function (got {type(found).__name__})",
            "point it at a keras.callbacks.Callback subclass",
        )
    try:
        callback = found()
    except Exception as err:
        raise ConfigError.single(
            "train.callbacks",
            path,
            "a callback made with no arguments (it raised the error below)",
            "give its arguments defaults",
            detail=told(err, found),
        ) from None
    if not isinstance(callback, keras.callbacks.Callback):
        raise ConfigError.single(
            "train.callbacks",
            path,
            f"a keras.callbacks.Callback (got {type(callback).__name__})",
            "subclass keras.callbacks.Callback",
        )
    return callback
