"""Layer-level training under a strategy: two CPU replicas, SGD steps with or without the layer swaps, and what a
test compares of them (losses, outputs, gradients, every replica's copy of every variable); a stock Keras, without
the launcher, that loads the swapped models' files."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf


def make_strategy(kind: str):
    """The default strategy, or MirroredStrategy over the suite's two logical CPUs."""
    if kind == "default":
        return tf.distribute.get_strategy()
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())


def copies(variable) -> list[np.ndarray]:
    """Every replica's copy of a variable (one under the default strategy)."""
    value = variable.value
    return [np.asarray(v) for v in getattr(value, "values", [value])]


def train_steps(make_model, swapped: bool, kind: str, xla: bool, x, y, *, learning_rate: float, steps: int) -> dict:
    """`steps` SGD steps of `make_model()` on (x, y) split across the strategy's replicas, the forward and backward
    compiled with XLA when `xla`: per-step losses and train-mode outputs, the first step's gradients, every copy of
    every variable after the steps, the trained model's inference outputs, and the model."""
    from launcher.train.layer_swaps import swap_layers

    keras.utils.set_random_seed(0)
    strategy = make_strategy(kind)
    with strategy.scope():
        model = make_model()
        if swapped:
            swap_layers(model, strategy.num_replicas_in_sync)
        optimizer = keras.optimizers.SGD(learning_rate)
        optimizer.build(model.trainable_variables)
    x, y = tf.constant(x, tf.float32), tf.constant(y, tf.float32)
    replicas = strategy.num_replicas_in_sync

    def forward_backward(x, y):
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            loss = tf.reduce_mean(tf.square(out - y)) / replicas
        return loss, out, tape.gradient(loss, model.trainable_variables)

    if xla:
        forward_backward = tf.function(forward_backward, jit_compile=True)

    def replica_step(x, y):
        loss, out, grads = forward_backward(x, y)
        optimizer.apply(grads, model.trainable_variables)
        return loss, out, grads

    @tf.function
    def step():
        shards = strategy.experimental_distribute_values_from_function(
            lambda ctx: tuple(tf.split(t, replicas)[ctx.replica_id_in_sync_group] for t in (x, y))
        )
        loss, out, grads = strategy.run(replica_step, args=shards)
        gather = lambda t: strategy.gather(t, axis=0)  # noqa: E731
        return strategy.reduce("SUM", loss, axis=None), gather(out), [strategy.reduce("SUM", g, None) for g in grads]

    losses, outputs, first_grads = [], [], None
    for _ in range(steps):
        loss, out, grads = step()
        losses.append(float(loss))
        outputs.append(np.asarray(out))
        first_grads = first_grads if first_grads is not None else [np.asarray(g) for g in grads]
    return {
        "losses": np.array(losses),
        "outputs": np.stack(outputs),
        "grads": first_grads,
        "state": {v.path: copies(v) for v in model.variables},
        "inference": np.asarray(model(x, training=False)),
        "model": model,
    }


class StockKeras:
    """A second interpreter that never imports the launcher (a Keras as a person has it), started on the first
    question and kept for the test process: each `.keras` file it is given is loaded there, so the swapped layers'
    files are checked by one interpreter, not one each (~5 CPU-s a start)."""

    SERVER = """
import json, sys, numpy as np, keras
for line in sys.stdin:
    path, given, got = json.loads(line)
    model = keras.saving.load_model(path)
    kinds = sorted({type(layer).__module__ + "." + type(layer).__name__ for layer in model.layers})
    assert not any(name.startswith("launcher") for name in sys.modules), "the launcher was imported"
    np.save(got, np.asarray(model(np.load(given), training=False)))
    print(json.dumps(kinds), flush=True)
"""

    def __init__(self, folder):
        self.folder, self.process, self.asked = folder, None, 0

    def predict(self, model, x) -> tuple[list[str], np.ndarray]:
        """`model` saved as a `.keras` file and loaded by the stock interpreter: the classes of its top-level layers
        there, and its inference outputs on `x`."""
        import json
        import select
        import subprocess
        import sys

        if self.process is None:
            self.errors = open(self.folder / "stock_keras.err", "w+")  # noqa: SIM115  (closed in `close`)
            self.process = subprocess.Popen(
                [sys.executable, "-c", self.SERVER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.errors,
                text=True,
            )
        self.asked += 1
        path, given, got = (self.folder / f"{self.asked}-{name}" for name in ("swapped.keras", "x.npy", "got.npy"))
        model.save(path)
        np.save(given, x)
        self.process.stdin.write(json.dumps([str(path), str(given), str(got)]) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], 300)
        answer = self.process.stdout.readline() if ready else ""
        if not answer:
            if not ready:  # no answer in 5 minutes: as the one-off interpreter's timeout was
                self.process.kill()
            self.process.wait(timeout=60)
            self.errors.seek(0)
            raise AssertionError(f"the stock Keras interpreter ended: {self.errors.read()[-2000:]}")
        return json.loads(answer), np.load(got)

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(timeout=60)
            self.errors.close()
