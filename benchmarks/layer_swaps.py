"""Stock Keras layers against the swapped ones (model.layer_swaps=auto), on a benchmark model's train step: the CNN
(BatchNormalization -> FusedBatchNormV3) or the transformer LM (Dense + GELU -> one compiled float32 cluster).

    .venv/bin/python benchmarks/layer_swaps.py                 # the CNN, fp32 and bf16, 5 interleaved repeats of 20
    .venv/bin/python benchmarks/layer_swaps.py --workload lm --precisions bf16 --repeats 9

One process per precision builds both models (the same weights), compiles both steps, then times blocks of
`--steps` steps alternately (stock fused, fused stock, ...), so a busy spell of a shared machine does not fall on
one kind. Prints each block, then per kind the median, min and max ms per step and the ratio of the medians
(stock / fused: > 1 means the swap is faster). The CPU is printed with the numbers: say which in docs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ab import cpu_kind  # noqa: E402

POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16"}
DESCRIBED = {
    "cnn": "CNN (32-64-128 filters, 32x32x3)",
    "lm": "transformer LM (2 layers, width 256, feed-forward 1024, sequences of 64 tokens)",
}


def inputs(workload: str, batch: int):
    """A batch of the workload's shape: images and 10 classes, or token sequences and their next tokens."""
    import numpy as np
    import tensorflow as tf
    from workloads import WORKLOADS

    spec = WORKLOADS[workload]
    rng = np.random.default_rng(0)
    if spec["kind"] == "tokens":
        shape = (batch, *spec["features"])
        x = tf.constant(rng.integers(0, spec["classes"], size=shape))
        return x, tf.constant(rng.integers(0, spec["classes"], size=shape))
    x = tf.constant(rng.normal(size=(batch, *spec["features"])), tf.float32)
    return x, tf.constant(rng.integers(0, spec["classes"], size=batch))


def measure(workload: str, precision: str, repeats: int, steps: int, batch: int) -> dict:
    import keras
    import tensorflow as tf
    from workloads import WORKLOADS

    from launcher.train.layer_swaps import swap_layers

    keras.mixed_precision.set_global_policy(POLICIES[precision])
    x, y = inputs(workload, batch)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    steps_of = {}
    for kind in ("stock", "fused"):
        keras.utils.set_random_seed(0)
        model = WORKLOADS[workload]["keras_model"]()
        if kind == "fused":
            swap_layers(model, 1)
        optimizer = keras.optimizers.Adam(1e-3)
        optimizer.build(model.trainable_variables)

        @tf.function
        def run(n, model=model, optimizer=optimizer):
            loss = tf.constant(0.0)
            for _ in tf.range(n):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, tf.cast(model(x, training=True), tf.float32))
                optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
            return loss

        float(run(tf.constant(2)))  # trace and warm up
        steps_of[kind] = run
    times = {"stock": [], "fused": []}
    for repeat in range(repeats):
        for kind in ("stock", "fused") if repeat % 2 == 0 else ("fused", "stock"):
            start = time.perf_counter()
            float(steps_of[kind](tf.constant(steps)))
            ms = (time.perf_counter() - start) * 1000 / steps
            times[kind].append(ms)
            print(f"{precision} repeat {repeat} {kind:5} {ms:7.1f} ms/step", file=sys.stderr, flush=True)
    result = {k: {"median": statistics.median(v), "min": min(v), "max": max(v)} for k, v in times.items()}
    result["ratio"] = result["stock"]["median"] / result["fused"]["median"]
    # The ratio's spread: the worst and best pairing of one kind's blocks with the other's.
    result["ratio_range"] = [
        result["stock"]["min"] / result["fused"]["max"],
        result["stock"]["max"] / result["fused"]["min"],
    ]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=list(POLICIES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workload", default="cnn", choices=["cnn", "lm"])
    parser.add_argument("--batch", type=int, default=0, help="default: the workload's (CNN 256, LM 16 sequences)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child process: this precision only, JSON on stdout
    args = parser.parse_args()
    from workloads import WORKLOADS

    args.batch = args.batch or WORKLOADS[args.workload]["batch"]
    if args.one:
        print(json.dumps(measure(args.workload, args.one, args.repeats, args.steps, args.batch)))
        return
    print(f"CPU: {cpu_kind()}; the benchmark {DESCRIBED[args.workload]}, batch {args.batch}, Adam")
    for precision in args.precisions:
        command = [sys.executable, __file__, "--one", precision, "--repeats", str(args.repeats)]
        command += ["--steps", str(args.steps), "--batch", str(args.batch), "--workload", args.workload]
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
        r = json.loads(done.stdout.strip().splitlines()[-1])
        stock, fused = r["stock"], r["fused"]
        print(
            f"{precision}: stock {stock['median']:.1f} ms/step ({stock['min']:.1f}-{stock['max']:.1f}), "
            f"fused {fused['median']:.1f} ({fused['min']:.1f}-{fused['max']:.1f}); "
            f"stock/fused {r['ratio']:.2f}x (range {r['ratio_range'][0]:.2f}-{r['ratio_range'][1]:.2f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
