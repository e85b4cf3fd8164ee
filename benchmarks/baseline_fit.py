"""The hand-written script a person would write: Keras `model.fit`, as the TensorFlow guides do.

Same model, data, batch and epochs as the launcher run it is compared with. `--steps-per-execution 16`
compiles the same in-graph loop of steps the launcher runs (like for like); the default 1 is the script as a
person usually writes it.
Prints one JSON line: examples/s per epoch, time to first step, peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

from launcher.launch.mfu import process_age_seconds


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workload", required=True, choices=["mlp", "cnn", "lm", "small"])
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "mixed"])
    p.add_argument("--xla", default="false", choices=["true", "false"])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps-per-execution", type=int, default=1)
    args = p.parse_args()

    import keras
    from workloads import WORKLOADS, make_data

    spec = WORKLOADS[args.workload]
    policy = {"fp32": "float32", "bf16": "mixed_bfloat16", "mixed": "mixed_float16"}[args.precision]
    keras.mixed_precision.set_global_policy(policy)
    x, y = make_data(spec)
    model = spec["keras_model"]()
    # Next-token labels: padding (token 0) is not a target, as in the launcher's sequence task.
    ignore = 0 if spec.get("task") == "sequence" else None
    model.compile(
        keras.optimizers.Adam(1e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=ignore),
        metrics=["accuracy"],
        jit_compile=args.xla == "true",
        steps_per_execution=args.steps_per_execution,
    )
    times, first = [], {}

    class Clock(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            if "t" not in first:  # /proc is read once, at the end of the first step
                first["t"] = process_age_seconds()

        def on_epoch_end(self, epoch, logs=None):
            times.append(time.perf_counter() - self.start)

    model.fit(x, y, batch_size=spec["batch"], epochs=args.epochs, shuffle=True, verbose=0, callbacks=[Clock()])
    steps = len(x) // spec["batch"] + (1 if len(x) % spec["batch"] else 0)
    print(
        json.dumps(
            {
                "examples_per_sec": [len(x) / t for t in times],
                "steps_per_epoch": steps,
                "time_to_first_step_sec": first.get("t"),
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


if __name__ == "__main__":
    main()
