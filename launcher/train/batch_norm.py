"""The built model's BatchNormalization layers and their momentum: the facts `launcher.plan.rules.batch_norm`
(its twin one level up) warns by when a run is too short for their moving averages."""

from __future__ import annotations

from launcher.train.fine_tune import layer_paths


def batch_norm_momenta(model) -> dict[str, float]:
    """Every BatchNormalization layer below `model` (nested models' too, a fused swap included) by its path of
    names -> its momentum."""
    import keras

    return {
        path: float(layer.momentum)
        for path, layer in layer_paths(model).items()
        if isinstance(layer, keras.layers.BatchNormalization)
    }
