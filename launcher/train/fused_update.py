"""Keras optimizers whose update is one fused TensorFlow kernel per variable.

Keras's Adam update is about ten elementwise ops, each a pass over every parameter
(read m, write m, read v, write v, square, sqrt, divide...). Outside XLA that is
memory-bound work of the size of the model, every step; TensorFlow's training ops
(`ResourceApplyAdam`, `ResourceApplyKerasMomentum`) do the same arithmetic in one
multithreaded pass. Everything else stays Keras's: the learning-rate schedule,
gradient clipping, AdamW's decoupled weight decay, `iterations`, the slot variables
(in the same places, so checkpoints move freely between fused and unfused runs), and the
distribution logic (under tf.distribute `update_step` runs inside
`strategy.extended.update`, once per replica's copy of each variable).

Sparse gradients (`tf.IndexedSlices`, from embeddings) and amsgrad keep Keras's ops.
"""

from __future__ import annotations

import keras
import tensorflow as tf


def _handle(variable):
    """The resource handle of this replica's copy (inside `extended.update` a distributed
    variable resolves to the copy being updated)."""
    if isinstance(variable, keras.Variable):
        variable = variable.value  # the tf.Variable (or distributed variable) behind it
    return variable.handle


class _FusedAdamUpdate:
    """`update_step` of Keras's Adam (m, v, bias-corrected step) as ResourceApplyAdam."""

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad or isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        index = self._get_variable_index(variable)
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable),
            m=_handle(self._momentums[index]),
            v=_handle(self._velocities[index]),
            beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, dtype),
            beta1=beta_1,
            beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(gradient, dtype),
        )


@keras.saving.register_keras_serializable(package="launcher")
class FusedAdam(_FusedAdamUpdate, keras.optimizers.Adam):
    """keras.optimizers.Adam, updated by one ResourceApplyAdam per variable."""


@keras.saving.register_keras_serializable(package="launcher")
class FusedAdamW(_FusedAdamUpdate, keras.optimizers.AdamW):
    """keras.optimizers.AdamW: Keras applies the decoupled weight decay, then ResourceApplyAdam."""


@keras.saving.register_keras_serializable(package="launcher")
class FusedSGD(keras.optimizers.SGD):
    """keras.optimizers.SGD, updated by ResourceApplyKerasMomentum (or ResourceApplyGradientDescent)."""

    def update_step(self, gradient, variable, learning_rate):
        if isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        lr, grad = tf.cast(learning_rate, dtype), tf.cast(gradient, dtype)
        if self.momentum == 0:
            tf.raw_ops.ResourceApplyGradientDescent(var=_handle(variable), alpha=lr, delta=grad)
            return
        tf.raw_ops.ResourceApplyKerasMomentum(
            var=_handle(variable),
            accum=_handle(self.momentums[self._get_variable_index(variable)]),
            lr=lr,
            grad=grad,
            momentum=tf.cast(self.momentum, dtype),
            use_nesterov=self.nesterov,
        )


FUSED = {keras.optimizers.Adam: FusedAdam, keras.optimizers.AdamW: FusedAdamW, keras.optimizers.SGD: FusedSGD}
