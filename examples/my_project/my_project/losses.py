"""Focal loss on logits: down-weights the examples the model already gets right."""

import keras
from keras import ops


def focal_loss(y_true, y_pred, gamma: float = 2.0):
    """Per-example loss for integer labels and logits (the launcher averages it over the global batch)."""
    log_probs = ops.log_softmax(y_pred, axis=-1)
    picked = ops.take_along_axis(log_probs, ops.expand_dims(ops.cast(y_true, "int32"), -1), axis=-1)[:, 0]
    return -((1.0 - ops.exp(picked)) ** gamma) * picked


__all__ = ["focal_loss", "keras"]
