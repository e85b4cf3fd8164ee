"""Benchmark workloads: the same model and data for the launcher and the hand-written script."""

from __future__ import annotations

WORKLOADS = {
    # matmul-heavy: three 2048-wide layers, batch 512
    "mlp": {
        "batch": 512,
        "examples": 8192,
        "features": (256,),
        "classes": 10,
        "kind": "tabular",
        "launcher": ["model=mlp", "model.hidden_units=[2048,2048,2048]"],
    },
    "cnn": {
        "batch": 256,
        "examples": 4096,
        "features": (32, 32, 3),
        "classes": 10,
        "kind": "image",
        "launcher": ["model=cnn", "model.filters=[32,64,128]", "model.dense_units=128"],
    },
    # next-token language modelling: a causal transformer (2 layers, width 256, 4 heads, sequences of 64 tokens);
    # a step of 16 sequences is ~45-60 ms on 2 cores (measured: 262-375 sequences/s, AMD EPYC without AMX)
    "lm": {
        "batch": 16,
        "examples": 1024,
        "features": (64,),
        "classes": 1000,
        "kind": "tokens",
        "task": "sequence",
        "launcher": [
            "model=transformer",
            "task=sequence",
            "dataset.vocab_size=1000",
            "model.embed_dim=256",
            "model.num_heads=4",
            "model.ff_dim=1024",
            "model.num_layers=2",
        ],
    },
    # float16 has no fast path on this CPU: mixed runs only here
    "small": {
        "batch": 256,
        "examples": 8192,
        "features": (64,),
        "classes": 10,
        "kind": "tabular",
        "launcher": ["model=mlp", "model.hidden_units=[256,256]"],
    },
}


def launcher_overrides(name: str) -> list[str]:
    spec = WORKLOADS[name]
    shape = ",".join(str(d) for d in spec["features"])
    # validation_split: the launcher trains on (1 - split) of num_examples; make that `examples`.
    total = int(spec["examples"] / 0.9) + 1
    return [
        *spec["launcher"],
        "dataset=synthetic",
        f"dataset.kind={spec['kind']}",
        f"dataset.shape=[{shape}]",
        f"dataset.num_examples={total}",
        "dataset.validation_split=0.1",
        f"scaling.batch_size={spec['batch']}",
    ]


def make_source(spec):
    """Exactly the data the launcher's `dataset=synthetic` gives for this workload, labels fitted to its task."""
    from types import SimpleNamespace

    from launcher_datasets.synthetic import load

    from launcher.train.labels import fit_to_task

    cfg = SimpleNamespace(
        kind=spec["kind"],
        num_examples=int(spec["examples"] / 0.9) + 1,
        num_classes=spec["classes"],
        shape=list(spec["features"]),
        vocab_size=spec["classes"] if spec["kind"] == "tokens" else 1000,
        seed=0,
        validation_split=0.1,
        test_split=0.0,
        shuffle_seed=0,
        limit=0,
    )
    task = spec.get("task", "classification")
    return fit_to_task(load(cfg, task=task), task)


def make_data(spec):
    return make_source(spec).train


def _mlp(widths, features):
    import keras

    layers = [keras.Input(features)] + [keras.layers.Dense(w, activation="relu") for w in widths]
    return keras.Sequential([*layers, keras.layers.Dense(10, dtype="float32")])


def _cnn():
    import keras

    layers = [keras.Input((32, 32, 3))]
    for filters in (32, 64, 128):
        layers += [
            keras.layers.Conv2D(filters, 3, padding="same", use_bias=False),
            keras.layers.BatchNormalization(),
            keras.layers.Activation("relu"),
            keras.layers.MaxPooling2D(),
        ]
    layers += [
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10, dtype="float32"),
    ]
    return keras.Sequential(layers)


def _transformer():
    """The launcher's own builder (a Keras functional model): the script trains the same layers."""
    from types import SimpleNamespace

    from launcher_models.transformer import build

    cfg = SimpleNamespace(embed_dim=256, num_heads=4, ff_dim=1024, num_layers=2, dropout=0.0, patch_size=0)
    return build(cfg, make_source(WORKLOADS["lm"]))


WORKLOADS["mlp"]["keras_model"] = lambda: _mlp([2048] * 3, (256,))
WORKLOADS["lm"]["keras_model"] = _transformer
WORKLOADS["cnn"]["keras_model"] = _cnn
WORKLOADS["small"]["keras_model"] = lambda: _mlp([256, 256], (64,))
