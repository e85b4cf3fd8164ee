"""Gradient clipping after the all-reduce.

Keras clips (`clipnorm`, `global_clipnorm`) inside `apply`, before its TensorFlow backend all-reduces
the replicas' gradients, so under N replicas it clips N partial gradients and sums them: not the
gradient of the global batch, and not what one device with the same batch would do. Here the clip runs
on the all-reduced (and, under a loss-scale optimizer, already unscaled) gradients, the same on every
replica, so a run clips the same vector whatever its strategy.
"""

from __future__ import annotations

import keras
import tensorflow as tf

_CLASSES: dict[type, type] = {}


class _ClipAfterAllReduce:
    clip_each: float = 0.0  # per-variable L2 norm bound (optimizer.clipnorm)
    clip_global: float = 0.0  # global L2 norm bound (optimizer.global_clipnorm)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        reduced = list(super()._all_reduce_sum_gradients(grads_and_vars))
        grads = [g for g, _ in reduced]
        present = [g for g in grads if g is not None]
        if self.clip_each:
            present = [tf.clip_by_norm(g, self.clip_each) for g in present]
        if self.clip_global and present:
            present, _ = tf.clip_by_global_norm(present, self.clip_global)
        clipped = iter(present)
        return [(None if g is None else next(clipped), v) for g, v in reduced]


def clipping(optimizer_class: type, clip_each: float, clip_global: float):
    """`optimizer_class` with clipping after the all-reduce (a subclass made once per optimizer class)."""
    if optimizer_class not in _CLASSES:
        name = f"{optimizer_class.__name__}ClippedAfterAllReduce"
        _CLASSES[optimizer_class] = keras.saving.register_keras_serializable(package="launcher")(
            type(name, (_ClipAfterAllReduce, optimizer_class), {})
        )
    cls = _CLASSES[optimizer_class]

    def make(*args, **kwargs):
        optimizer = cls(*args, **kwargs)
        optimizer.clip_each, optimizer.clip_global = float(clip_each), float(clip_global)
        return optimizer

    return make
