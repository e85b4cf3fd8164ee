"""Carries Keras's EarlyStopping state across a resume (patience counts on where it was)."""

from __future__ import annotations

from launcher.contract import Hook, Position

EARLY_STOPPING_FIELDS = ("wait", "best", "best_epoch", "stopped_epoch")


class EarlyStoppingStateHook(Hook):
    def __init__(self):
        self.saved: dict = {}
        self.callbacks: list = []

    def on_train_begin(self, position: Position, callbacks) -> None:
        self.callbacks = _early_stoppers(callbacks)
        for callback in self.callbacks:
            for field in EARLY_STOPPING_FIELDS:
                if field in self.saved:
                    setattr(callback, field, self.saved[field])

    def state(self) -> dict:
        if not self.callbacks:
            return {"early_stopping": {}}
        first = self.callbacks[0]
        return {"early_stopping": {f: _plain(getattr(first, f, None)) for f in EARLY_STOPPING_FIELDS}}

    def load_state(self, state: dict) -> None:
        self.saved = dict(state.get("early_stopping") or {})


def _early_stoppers(callbacks) -> list:
    import keras

    if callbacks is None:
        return []
    return [c for c in callbacks.callbacks if isinstance(c, keras.callbacks.EarlyStopping)]


def _plain(value):
    """A JSON-safe number (Keras keeps numpy scalars); None when it is not one."""
    try:
        return float(value) if not isinstance(value, int | type(None)) else value
    except (TypeError, ValueError):
        return None
