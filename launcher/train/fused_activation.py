"""keras.layers.Dense whose bias add and activation run as one small XLA cluster, in float32; the matmul stays
on oneDNN.

Outside XLA, TensorFlow runs GELU as a chain of elementwise kernels (Erfc, Mul, Add...) forward and a longer one
backward, each a pass over the activations; under bfloat16 each kernel also converts every element to float32 and
back, so a transformer's feed-forward GELU costs more than its matmuls. Compiling the whole step with XLA fuses that
chain but gives up oneDNN's matmuls (XLA's CPU matmuls do not use AMX). This layer compiles only the elementwise
tail: the bias add and the activation, forward and backward, are one fused loop each, computed in float32 and rounded
once to the layer's compute dtype (Keras rounds after the bias add and inside the activation: the swapped layer is as
accurate or more). Measured on bias + activation, forward and backward, 1024x1024 (`benchmarks/
elementwise_candidates.py`, Intel Xeon with AMX, 2 cores, medians of 7): GELU 11.7 -> 3.5 ms in bfloat16 and
4.9 -> 3.0 ms in float32; SiLU 5.4 -> 3.2 ms and 3.1 -> 2.1 ms. ReLU is one kernel already (oneDNN fuses it) and
tanh gains only in bfloat16 (1.48x): both stay Keras's.

Everything else stays Keras's Dense: the variables, the matmul with its autocast kernel, LoRA, the config. Files the
model writes are the stock model's (`saved_as_stock`). Inside a step XLA compiles whole, the cluster is inlined.
"""

from __future__ import annotations

import functools

import keras
import tensorflow as tf

from launcher.train.saved_as_stock import save_as_stock

# Activations worth a cluster, by the function Keras's Dense holds (`keras.activations.get(name)`).
FUSED_ACTIVATIONS = {keras.activations.gelu: "gelu", keras.activations.silu: "silu"}
FUSED_DTYPES = ("float16", "bfloat16", "float32")


@functools.cache
def bias_activation(name: str, with_bias: bool):
    """The compiled `activation(x + bias)` in float32, rounded once to x's dtype (one per activation and bias)."""
    activation = {"gelu": lambda v: tf.nn.gelu(v, approximate=False), "silu": tf.nn.silu}[name]

    if with_bias:

        def tail(x, bias):
            return tf.cast(activation(tf.cast(x, tf.float32) + bias), x.dtype)

    else:

        def tail(x):
            return tf.cast(activation(tf.cast(x, tf.float32)), x.dtype)

    # reduce_retracing: a ragged last batch reuses the trace (XLA still compiles each concrete shape once).
    return tf.function(tail, jit_compile=True, autograph=False, reduce_retracing=True)


class FusedActivationDense(keras.layers.Dense):
    """keras.layers.Dense whose bias add and GELU/SiLU are one compiled float32 cluster."""

    def call(self, inputs, training=None):
        why_not = self.unfused_because(inputs)
        if why_not:
            return super().call(inputs, training=training)
        x = keras.ops.matmul(inputs, self.kernel)
        tail = bias_activation(FUSED_ACTIVATIONS[self.activation], self.bias is not None)
        if self.bias is None:
            return tail(x)
        return tail(x, tf.cast(self.bias, tf.float32))

    def unfused_because(self, inputs=None) -> str | None:
        """Why this layer (or this call) runs Keras's ops (None: the cluster computes the same)."""
        if FUSED_ACTIVATIONS.get(self.activation) is None:
            return f"activation={getattr(self.activation, '__name__', self.activation)} (fused: gelu, silu)"
        for dtype in (self.compute_dtype, *([inputs.dtype] if inputs is not None else [])):
            name = keras.backend.standardize_dtype(dtype)
            if name not in FUSED_DTYPES:
                return f"{name} (the cluster computes {', '.join(FUSED_DTYPES)} in float32)"
        return None


save_as_stock(FusedActivationDense, keras.layers.Dense, "keras.layers.Dense")
