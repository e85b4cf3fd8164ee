"""keras.layers.BatchNormalization computed by one fused kernel (FusedBatchNormV3: oneDNN on CPU, cuDNN on GPU).

Keras 3's BatchNormalization is a chain of elementwise ops (Mean, SquaredDifference, Mean, Sub, Mul, Add...), each
a pass over the activations, forward and backward; outside XLA that is most of a small convnet's step. The fused
kernel normalizes in one pass (and its gradient is one more). Everything else stays Keras's: the variables (same
names, shapes and dtypes, so checkpoints and `.keras` files move freely between swapped and stock models), the
moving-average update (Keras's own `assign`s, so under tf.distribute they behave as the stock layer's), the float32
statistics under float16 and bfloat16 inputs, and `trainable=False` meaning inference mode.

Two differences the kernel has are corrected here: in training it returns the batch variance with Bessel's
correction (n / (n - 1)) where Keras averages the biased one, so it is scaled back; and it does no cross-replica
all-reduce, so a `synchronized=True` layer trains on Keras's ops whenever more than one replica is in sync.
Inputs the kernel does not take (not 4-D channels-last, a mask, float64...) run the stock call.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from launcher.train.saved_as_stock import save_as_stock

FUSED_DTYPES = ("float16", "bfloat16", "float32")
# TensorFlow's fused_batch_norm clamps a smaller epsilon up to this (cuDNN's minimum): below it the kernel would
# normalize with a different epsilon than Keras's.
MIN_EPSILON = 1.001e-5


class FusedBatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization whose `call` is FusedBatchNormV3 where the two compute the same thing."""

    def call(self, inputs, training=None, mask=None):
        if self.unfused_because(inputs, mask, training=bool(training and self.trainable)):
            return super().call(inputs, training=training, mask=mask)
        x = inputs
        if x.dtype != tf.float32 and keras.backend.standardize_dtype(x.dtype) != self.compute_dtype:
            x = tf.cast(x, tf.float32)  # Keras computes in float32: the output is rounded once, to compute_dtype
        channels = x.shape[-1]
        scale = tf.cast(self.gamma, tf.float32) if self.scale else tf.ones([channels], tf.float32)
        offset = tf.cast(self.beta, tf.float32) if self.center else tf.zeros([channels], tf.float32)
        if training and self.trainable:
            y = self._train(x, scale, offset)
        else:
            y, *_ = tf.raw_ops.FusedBatchNormV3(
                x=x,
                scale=scale,
                offset=offset,
                mean=tf.cast(self.moving_mean, tf.float32),
                variance=tf.cast(self.moving_variance, tf.float32),
                epsilon=self.epsilon,
                data_format="NHWC",
                is_training=False,
            )
        return tf.cast(y, self.compute_dtype)

    def _train(self, x, scale, offset):
        """Normalize by the batch's statistics and move the averages as Keras does (its biased variance)."""
        empty = tf.constant([], tf.float32)
        y, mean, unbiased, *_ = tf.raw_ops.FusedBatchNormV3(
            x=x,
            scale=scale,
            offset=offset,
            mean=empty,
            variance=empty,
            epsilon=self.epsilon,
            exponential_avg_factor=1.0,
            data_format="NHWC",
            is_training=True,
        )
        count = tf.cast(tf.reduce_prod(tf.shape(x, out_type=tf.int64)[:-1]), tf.float32)
        variance = unbiased * ((count - 1.0) / count)  # the kernel's n / (n - 1) taken back out
        momentum = self.momentum
        self.moving_mean.assign(tf.cast(self.moving_mean, tf.float32) * momentum + mean * (1.0 - momentum))
        self.moving_variance.assign(tf.cast(self.moving_variance, tf.float32) * momentum + variance * (1.0 - momentum))
        return y

    def unfused_because(self, inputs, mask=None, training: bool = False) -> str | None:
        """Why this call must run Keras's ops (None: the fused kernel computes the same)."""
        static = self.settings_unfused_because()
        if static:
            return static
        rank = len(inputs.shape)
        if rank != 4:
            return f"{rank}-D inputs (the fused kernel takes 4-D: batch, height, width, channels)"
        if self.axis not in (-1, 3):
            return f"axis={self.axis}, not the last (the CPU kernel is channels-last only)"
        if mask is not None:
            return "a mask (the kernel cannot leave masked positions out of the statistics)"
        for dtype in (inputs.dtype, self.compute_dtype):
            if keras.backend.standardize_dtype(dtype) not in FUSED_DTYPES:
                return f"{keras.backend.standardize_dtype(dtype)} (the kernel takes {', '.join(FUSED_DTYPES)})"
        if training and self.synchronized and _replicas_in_sync() > 1:
            return (
                f"synchronized=True with {_replicas_in_sync()} replicas: Keras all-reduces the batch statistics "
                "across replicas, the kernel cannot"
            )
        return None

    def settings_unfused_because(self) -> str | None:
        """Why this layer's settings never run fused, whatever its inputs (None: they may)."""
        if self.renorm:
            return "renorm=True (batch renormalization's corrections are not in the fused kernel)"
        if self.epsilon < MIN_EPSILON:
            return f"epsilon={self.epsilon:g} is below the fused kernel's minimum {MIN_EPSILON:g}"
        return None


def _replicas_in_sync() -> int:
    """Replicas whose statistics Keras's synchronized moments all-reduce (1 outside a replica context)."""
    context = tf.distribute.get_replica_context()
    return 1 if context is None else int(context.num_replicas_in_sync)


save_as_stock(FusedBatchNormalization, keras.layers.BatchNormalization, "keras.layers.BatchNormalization")
