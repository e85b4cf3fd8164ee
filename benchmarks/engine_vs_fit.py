"""Launcher engine vs hand-written `model.fit`, same model/data/batch, interleaved, one process.

    .venv/bin/python benchmarks/engine_vs_fit.py [--precision fp32] [--xla false] [--reps 3]

Prints examples/s medians (first epoch, which compiles, excluded) and the ratio
launcher / model.fit. A ratio >= 1.00 means the engine costs no speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from launcher import runtime


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "mixed"])
    p.add_argument("--xla", default="false", choices=["true", "false"])
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--examples", type=int, default=16384)
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--reps", type=int, default=3)
    return p.parse_args()


def launcher_config(args):
    from omegaconf import OmegaConf

    from launcher.schema import Config, DatasetBase, MlpConfig, SyntheticConfig, SyntheticKind  # noqa: F401

    cfg = OmegaConf.to_object(OmegaConf.structured(Config(model=MlpConfig(), dataset=SyntheticConfig())))
    cfg.model.hidden_units = [args.width] * args.layers
    cfg.dataset.kind = SyntheticKind.tabular
    cfg.dataset.shape = [args.features]
    cfg.dataset.num_examples = int(args.examples / 0.8) + 1
    cfg.scaling.batch_size = args.batch
    cfg.train.epochs = args.epochs
    cfg.xla = args.xla
    cfg.precision.name = cfg.precision.name.__class__(args.precision)
    return cfg


def main():
    args = parse()
    runtime.quiet_tensorflow_logs(False)
    import keras

    from launcher.build import build
    from launcher.engine import Engine
    from launcher.environment import probe
    from launcher.registry import DATASETS
    from launcher.resolve import resolve, schedule

    cfg = launcher_config(args)
    plan = resolve(cfg, probe())
    strategy = runtime.configure(plan, 0, False)
    source = DATASETS.get("synthetic").load(cfg.dataset)
    schedule(cfg, plan, source.num_train, source.num_val)
    x, y = source.train

    def run_fit():
        model = keras.Sequential(
            [keras.Input((args.features,))]
            + [keras.layers.Dense(args.width, activation="relu") for _ in range(args.layers)]
            + [keras.layers.Dense(10, dtype="float32")]
        )
        model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], jit_compile=args.xla == "true")
        times = []

        class Timer(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                self.t = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                times.append(time.perf_counter() - self.t)

        model.fit(x, y, batch_size=args.batch, epochs=args.epochs, verbose=0, callbacks=[Timer()], shuffle=True)
        return [len(x) / t for t in times[1:]]

    def run_engine():
        built = build(cfg, plan, source, strategy)
        engine = Engine(built, plan, source, verbose=0)
        result = engine.fit(args.epochs)
        return [e.logs["examples_per_sec"] for e in result.epochs[1:]]

    fit, ours = [], []
    for _ in range(args.reps):
        fit += run_fit()
        ours += run_engine()
    report = {
        "workload": f"mlp {args.layers}x{args.width} batch {args.batch}",
        "precision": args.precision, "xla": args.xla, "step": plan["step"],
        "fit_examples_per_sec": statistics.median(fit),
        "launcher_examples_per_sec": statistics.median(ours),
    }
    report["ratio"] = report["launcher_examples_per_sec"] / report["fit_examples_per_sec"]
    print(f"{report['workload']} {args.precision} xla={args.xla}: model.fit {report['fit_examples_per_sec']:.0f} ex/s, "
          f"launcher {report['launcher_examples_per_sec']:.0f} ex/s, ratio {report['ratio']:.2f}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
