"""Standard Keras callbacks from the `train` config (the engine drives them)."""

from __future__ import annotations

import keras


def make_callbacks(train_cfg) -> list:
    callbacks = []  # non-finite losses: the engine's NumericsGuard (train.on_nonfinite), not TerminateOnNaN
    es = train_cfg.early_stopping
    if es.enabled:
        callbacks.append(
            keras.callbacks.EarlyStopping(monitor=es.monitor, patience=es.patience, mode=es.mode.value, verbose=1)
        )
    rl = train_cfg.reduce_lr_on_plateau
    if rl.enabled:
        callbacks.append(
            keras.callbacks.ReduceLROnPlateau(
                monitor=rl.monitor, factor=rl.factor, patience=rl.patience, mode=rl.mode.value, verbose=1
            )
        )
    return callbacks
