"""Carries the state of Keras's EarlyStopping and ReduceLROnPlateau across a resume: their patience counts on
where it was (the learning rate a plateau lowered is the optimizer's, in the checkpoint)."""

from __future__ import annotations

from launcher.contract import Hook, Position

# sidecar key -> (callback class name in keras.callbacks, the attributes that make its state)
CALLBACK_FIELDS = {
    "early_stopping": ("EarlyStopping", ("wait", "best", "best_epoch", "stopped_epoch")),
    "reduce_lr": ("ReduceLROnPlateau", ("wait", "best", "cooldown_counter")),
}


class CallbackStateHook(Hook):
    def __init__(self):
        self.saved: dict = {}
        self.callbacks: dict = {}  # sidecar key -> the engine's callback of that class

    def on_train_begin(self, position: Position, callbacks) -> None:
        self.callbacks = _stateful(callbacks)
        for key, callback in self.callbacks.items():
            for field, value in (self.saved.get(key) or {}).items():
                if field in CALLBACK_FIELDS[key][1]:
                    setattr(callback, field, value)

    def state(self) -> dict:
        return {
            key: {f: _plain(getattr(callback, f, None)) for f in CALLBACK_FIELDS[key][1]}
            for key, callback in self.callbacks.items()
        } or {"early_stopping": {}}

    def load_state(self, state: dict) -> None:
        self.saved = {key: dict(state.get(key) or {}) for key in CALLBACK_FIELDS}


def _stateful(callbacks) -> dict:
    import keras

    if callbacks is None:
        return {}
    found = {}
    for key, (name, _) in CALLBACK_FIELDS.items():
        kind = getattr(keras.callbacks, name)
        matches = [c for c in callbacks.callbacks if isinstance(c, kind)]
        if matches:
            found[key] = matches[0]
    return found


def _plain(value):
    """A JSON-safe number (Keras keeps numpy scalars); None when it is not one."""
    try:
        return float(value) if not isinstance(value, int | type(None)) else value
    except (TypeError, ValueError):
        return None
