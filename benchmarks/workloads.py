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


def make_data(spec):
    """Exactly the training split the launcher's `dataset=synthetic` gives for this workload."""
    from types import SimpleNamespace

    from launcher_datasets.synthetic import load

    cfg = SimpleNamespace(
        kind=spec["kind"],
        num_examples=int(spec["examples"] / 0.9) + 1,
        num_classes=spec["classes"],
        shape=list(spec["features"]),
        vocab_size=1000,
        seed=0,
        validation_split=0.1,
        shuffle_seed=0,
        limit=0,
    )
    x, y = load(cfg).train
    return x, y


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


WORKLOADS["mlp"]["keras_model"] = lambda: _mlp([2048] * 3, (256,))
WORKLOADS["cnn"]["keras_model"] = _cnn
WORKLOADS["small"]["keras_model"] = lambda: _mlp([256, 256], (64,))
