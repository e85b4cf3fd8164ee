"""The transformer's elementwise work, stock against the fused candidates: which ones `model.layer_swaps` takes.

    .venv/bin/python benchmarks/elementwise_candidates.py               # fp32 and bf16, 7 interleaved repeats
    .venv/bin/python benchmarks/elementwise_candidates.py --dtypes bfloat16 --repeats 9

Forward and backward of the benchmark LM's shapes (16 sequences x 64 tokens), each in a tf.function loop of
`--steps` iterations, the kinds of one operation timed in alternating order per repeat. Candidates:
- bias add + activation (width 1024): Keras's ops; one XLA cluster computing in float32 (what the swap runs);
  the same float32 arithmetic as plain TensorFlow ops (no XLA);
- layer normalization (width 256): Keras's ops; one XLA cluster in float32; FusedBatchNormV3 over the rows
  (the trick Keras 2 used: the rows as channels of an NCHW batch of one), scale and shift after.
Prints the median and spread in microseconds per forward + backward, and stock / candidate (> 1: faster).
"""

from __future__ import annotations

import argparse
import statistics
import time

ROWS = 16 * 64


def _timed(kinds: dict, inputs, steps: int, repeats: int) -> dict[str, list[float]]:
    import tensorflow as tf

    loops = {}
    for name, fn in kinds.items():

        @tf.function
        def loop(n, fn=fn):
            total = tf.constant(0.0)
            for _ in tf.range(n):
                with tf.GradientTape() as tape:
                    tape.watch(inputs)
                    out = tf.cast(fn(*inputs), tf.float32)
                    loss = tf.reduce_sum(out * out)
                for grad in tape.gradient(loss, inputs):
                    total += tf.reduce_sum(tf.cast(grad, tf.float32))
            return total

        float(loop(tf.constant(2)))  # trace and compile
        loops[name] = loop
    times = {name: [] for name in kinds}
    for repeat in range(repeats):
        for name in list(kinds) if repeat % 2 == 0 else list(kinds)[::-1]:
            start = time.perf_counter()
            float(loops[name](tf.constant(steps)))
            times[name].append((time.perf_counter() - start) / steps * 1e6)
    return times


def activations(dtype: str):
    import keras
    import tensorflow as tf

    x = tf.cast(tf.random.normal([ROWS, 1024]), dtype)
    bias = tf.random.normal([1024])
    out = {}
    for name, act in (("gelu", keras.activations.gelu), ("silu", keras.activations.silu), ("tanh", tf.tanh)):
        compiled = tf.function(
            lambda x, b, act=act: tf.cast(act(tf.cast(x, tf.float32) + b), x.dtype), jit_compile=True
        )
        out[f"bias + {name}"] = {
            "keras": lambda x, b, act=act: act(x + tf.cast(b, x.dtype)),
            "xla float32": compiled,
            "tf float32": lambda x, b, act=act: tf.cast(act(tf.cast(x, tf.float32) + b), x.dtype),
        }
    return out, (x, bias)


def layer_norms(dtype: str):
    import keras
    import tensorflow as tf

    x = tf.cast(tf.random.normal([16, 64, 256]), dtype)
    gamma, beta = tf.ones([256]), tf.zeros([256])

    def stock(x, g, b):
        return keras.ops.cast(keras.ops.layer_normalization(x, g, b, -1, 1e-6), x.dtype)

    @tf.function(jit_compile=True)
    def compiled(x, g, b):
        x32 = tf.cast(x, tf.float32)
        mean, variance = tf.nn.moments(x32, axes=[-1], keepdims=True)
        return tf.cast((x32 - mean) * tf.math.rsqrt(variance + 1e-6) * g + b, x.dtype)

    def fused_batch_norm(x, g, b):
        rows = ROWS
        empty = tf.constant([], tf.float32)
        y, *_ = tf.raw_ops.FusedBatchNormV3(
            x=tf.reshape(x, [1, rows, 256, 1]),
            scale=tf.ones([rows]),
            offset=tf.zeros([rows]),
            mean=empty,
            variance=empty,
            epsilon=1e-6,
            data_format="NCHW",
            is_training=True,
        )
        return tf.reshape(y, tf.shape(x)) * tf.cast(g, x.dtype) + tf.cast(b, x.dtype)

    return {"layer norm": {"keras": stock, "xla float32": compiled, "FusedBatchNormV3": fused_batch_norm}}, (
        x,
        gamma,
        beta,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    from layer_swaps import cpu

    print(f"CPU: {cpu()}; us per forward + backward, median (min-max) of {args.repeats} interleaved repeats")
    for dtype in args.dtypes:
        for make in (activations, layer_norms):
            groups, inputs = make(dtype)
            for operation, kinds in groups.items():
                times = _timed(kinds, inputs, args.steps, args.repeats)
                stock = statistics.median(times["keras"])
                cells = []
                for name, values in times.items():
                    median = statistics.median(values)
                    ratio = "" if name == "keras" else f", {stock / median:.2f}x"
                    cells.append(f"{name} {median:,.0f} ({min(values):,.0f}-{max(values):,.0f}{ratio})")
                print(f"{dtype:9} {operation:12} " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
