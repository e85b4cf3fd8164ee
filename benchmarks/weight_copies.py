"""What low-precision weight copies would save a bfloat16 train step, measured on the step itself.

    .venv/bin/python benchmarks/weight_copies.py                      # LM and MLP, 15 interleaved repeats of 20
    .venv/bin/python benchmarks/weight_copies.py --workloads lm --repeats 21

A mixed-bfloat16 step touches each float32 weight three times outside the matmuls: the forward casts it to
bfloat16 (Keras's autocast), the backward casts its bfloat16 gradient to float32, the update reads and writes it
(with m and v). A bfloat16 copy written by the update takes the forward's cast away and adds a write. Three train
steps of the same model (the launcher's swapped layers, bfloat16, batch of the workload), built with the same
weights and timed in alternating blocks:
- `stock`: what the launcher's `hybrid` step runs: the autocast reads and `launcher.train.fused_update.FusedAdam`
  (one ResourceApplyAdam per weight);
- `copy after update`: the forward reads a bfloat16 copy of each weight (its gradient goes to the float32 weight);
  FusedAdam, then each copy cast and assigned;
- `one XLA update`: the same reads; Adam's arithmetic and the copies' writes for every weight as one compiled
  cluster that reads the bfloat16 gradients (their cast fused in).
Prints ms per step per kind and stock / kind (> 1: the copies are faster). The CPU is printed with the numbers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
KINDS = ("stock", "copy after update", "one XLA update")


def read_copies(weights):
    """A bfloat16 copy of each float32 weight, which the forward's autocast reads instead of casting the weight;
    the gradient goes to the weight (cast to float32, as the stock cast's gradient is)."""
    import tensorflow as tf
    from keras.src.backend.common.variables import get_autocast_scope

    @tf.custom_gradient
    def as_copy(weight, copy):
        return tf.identity(copy), lambda dy: (tf.cast(dy, weight.dtype), None)

    copies = []
    for weight in weights:
        copy = tf.Variable(tf.cast(weight.value, tf.bfloat16), trainable=False)

        def autocast(value, weight=weight, copy=copy):
            scope = get_autocast_scope()
            if weight._autocast and scope is not None and scope.dtype == "bfloat16":
                return as_copy(tf.convert_to_tensor(value), copy.read_value())
            return value

        weight._maybe_autocast = autocast
        copies.append(copy)
    return copies


def xla_adam(weights, copies, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
    """Keras's Adam update for every weight and the write of its copy, one compiled cluster."""
    import tensorflow as tf

    slots = [(tf.Variable(tf.zeros(w.shape)), tf.Variable(tf.zeros(w.shape))) for w in weights]
    iterations = tf.Variable(0.0)

    @tf.function(jit_compile=True)
    def apply(grads):
        step = iterations + 1.0
        alpha = learning_rate * tf.sqrt(1.0 - tf.pow(beta_2, step)) / (1.0 - tf.pow(beta_1, step))
        for w, c, (m, v), g in zip(weights, copies, slots, grads, strict=True):
            g = tf.cast(g, tf.float32)
            m_new = m + (g - m) * (1.0 - beta_1)
            v_new = v + (g * g - v) * (1.0 - beta_2)
            w_new = w.value - alpha * m_new / (tf.sqrt(v_new) + epsilon)
            m.assign(m_new)
            v.assign(v_new)
            w.assign(w_new)
            c.assign(tf.cast(w_new, tf.bfloat16))
        iterations.assign(step)

    # An embedding's gradient is sparse (IndexedSlices): made dense, as the compiled cluster takes tensors.
    return lambda grads: apply([tf.convert_to_tensor(g) for g in grads])


def train_step(workload: str, kind: str):
    """tf.function(n) running n train steps of a fresh model of `workload` (same seed each kind)."""
    import keras
    import tensorflow as tf
    from layer_swaps import inputs
    from workloads import WORKLOADS

    from launcher.train.fused_update import FusedAdam
    from launcher.train.layer_swaps import swap_layers

    keras.utils.set_random_seed(0)
    model = WORKLOADS[workload]["keras_model"]()
    swap_layers(model, 1)
    weights = model.trainable_variables
    x, y = inputs(workload, WORKLOADS[workload]["batch"])
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if kind == "stock":
        optimizer = FusedAdam(1e-3)
        optimizer.build(weights)
        update = lambda grads: optimizer.apply(grads, weights)  # noqa: E731
    else:
        copies = read_copies(weights)
        if kind == "copy after update":
            optimizer = FusedAdam(1e-3)
            optimizer.build(weights)

            def update(grads):
                optimizer.apply(grads, weights)
                for w, c in zip(weights, copies, strict=True):
                    c.assign(tf.cast(w.value, tf.bfloat16))

        else:
            update = xla_adam(weights, copies)

    @tf.function
    def run(n):
        loss = tf.constant(0.0)
        for _ in tf.range(n):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, tf.cast(model(x, training=True), tf.float32))
            update(tape.gradient(loss, weights))
        return loss

    return run


def measure(workload: str, repeats: int, steps: int) -> dict[str, list[float]]:
    import keras
    import tensorflow as tf

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    runs = {kind: train_step(workload, kind) for kind in KINDS}
    first = {kind: float(run(tf.constant(1))) for kind, run in runs.items()}  # trace, compile; the same loss
    if max(first.values()) - min(first.values()) > 1e-2 * abs(first["stock"]):
        raise RuntimeError(f"the kinds' first losses differ: {first}")
    times = {kind: [] for kind in KINDS}
    for repeat in range(repeats):
        for kind in KINDS if repeat % 2 == 0 else KINDS[::-1]:
            start = time.perf_counter()
            float(runs[kind](tf.constant(steps)))
            times[kind].append((time.perf_counter() - start) * 1000 / steps)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="+", default=["lm", "mlp"], choices=["lm", "mlp", "cnn"])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    from layer_swaps import cpu

    print(f"CPU: {cpu()}; ms per train step, median (min-max) of {args.repeats} interleaved blocks of {args.steps}")
    for workload in args.workloads:
        times = measure(workload, args.repeats, args.steps)
        stock = statistics.median(times["stock"])
        for kind, values in times.items():
            median = statistics.median(values)
            print(
                f"{workload:4} {kind:18} {median:7.2f} ({min(values):.2f}-{max(values):.2f})  stock / this "
                f"{stock / median:.3f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
