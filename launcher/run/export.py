"""Export the trained network as a `.keras` file that loads with `keras.saving.load_model`."""

from __future__ import annotations

from pathlib import Path

from launcher.train.ema import ema_weights


def export_model(model, path: Path) -> None:
    """Save the model without the training-only optimizer state (it lives in the checkpoints); under
    optimizer.use_ema with the weights' moving average."""

    optimizer = model.optimizer
    model.optimizer = None
    try:
        with ema_weights(model, optimizer):
            model.save(path)
    finally:
        model.optimizer = optimizer
