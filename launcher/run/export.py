"""Export the trained network as a `.keras` file that loads with `keras.saving.load_model`."""

from __future__ import annotations

from pathlib import Path


def export_model(model, path: Path) -> None:
    """Save the model without the training-only optimizer state (it lives in the checkpoints)."""
    optimizer = model.optimizer
    model.optimizer = None
    try:
        model.save(path)
    finally:
        model.optimizer = optimizer
