"""Every model builder and dataset builder, through the real config and engine."""

from __future__ import annotations

import math

import numpy as np
import pytest
from support.config import compose, config

from launcher.config.errors import ConfigError
from launcher.launch.training import execute
from launcher.train.registry import DATASETS, MODELS

# Two epochs of 12 steps: the loss falls from the first to the second whatever the model (measured: by 0.6-1.1 on
# each); the FLOPs count (measure_utilization) is not what these tests show.
QUICK = [
    "train.epochs=2",
    "train.max_steps_per_epoch=12",
    "train.measure_utilization=false",
    "tracking.enabled=false",
    "checkpoint.enabled=false",
    "checkpoint.export_model=false",
    "scaling.batch_size=16",
    "optimizer.learning_rate=0.005",
]


@pytest.mark.slow  # every built-in model trained, ResNet50 among them, seconds of CPU in this process
@pytest.mark.parametrize(
    "overrides",
    [
        ["model=mlp", "dataset=synthetic", "dataset.kind=tabular", "dataset.shape=[12]"],
        ["model=cnn", "dataset=digits"],
        [
            "model=resnet",
            "dataset=synthetic",
            "dataset.shape=[8,8,3]",
            "dataset.num_examples=96",
            "train.max_steps_per_epoch=2",
            "train.epochs=1",
        ],
        [
            "model=transformer",
            "dataset=synthetic",
            "dataset.kind=tokens",
            "dataset.shape=[12]",
            "dataset.vocab_size=50",
            "dataset.num_examples=512",
        ],
        ["model=transformer", "dataset=digits"],
    ],
    ids=["mlp-tabular", "cnn-digits", "resnet-image", "transformer-tokens", "transformer-image"],
)
def test_each_model_trains_under_a_mixed_policy_with_float32_logits(overrides, tmp_path):
    # ResNet50 in float16 is very slow on a CPU without a float16 fast path: bf16 there.
    precision = "bf16" if "model=resnet" in overrides else "mixed"
    cfg = compose(*QUICK, f"precision={precision}", "xla=false", *overrides)
    outcome = execute(cfg, tmp_path / "run", tmp_path)
    assert outcome.error is None
    losses = [e.logs["loss"] for e in outcome.result.epochs]
    assert all(math.isfinite(v) for v in losses)
    if len(losses) > 1:
        assert losses[-1] < losses[0]
    model = outcome.model
    policy = "mixed_bfloat16" if precision == "bf16" else "mixed_float16"
    assert model.outputs[0].dtype == "float32"
    hidden = [layer for layer in model.layers[1:-1] if layer.weights]
    assert hidden and all(layer.dtype_policy.name == policy for layer in hidden)
    assert model.layers[-1].dtype_policy.name == "float32"


@pytest.mark.slow  # builds every model, ResNet50 among them, seconds of CPU in this process
def test_model_output_is_float32_and_layers_follow_the_policy():
    import keras

    from launcher.train.build import float32_output

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        source = DATASETS.get("digits").load(config("dataset=digits").dataset)
        for name in MODELS.modules:  # the built-in builders (custom is tested with the user's builders)
            cfg = config(f"model={name}").model
            if name == "resnet":
                cfg.variant = "ResNet50"
            model, _ = float32_output(MODELS.get(name).build(cfg, source), mixed=True)
            assert model.outputs[0].dtype == "float32", name
            assert any(layer.dtype_policy.name == "mixed_bfloat16" for layer in model.layers[1:]), name
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize(
    ("kind", "shape", "expected"),
    [("image", [6, 6, 2], (6, 6, 2)), ("tabular", [4, 3], (12,)), ("tokens", [10], (10,))],
)
def test_synthetic_kinds_are_seeded(kind, shape, expected):
    cfg = config("dataset=synthetic", f"dataset.kind={kind}", f"dataset.shape={shape}".replace(" ", "")).dataset
    a, b = DATASETS.get("synthetic").load(cfg), DATASETS.get("synthetic").load(cfg)
    assert a.input_shape == expected and a.kind == kind
    np.testing.assert_array_equal(a.train[0], b.train[0])
    assert a.num_train + a.num_val == cfg.num_examples
    cfg.seed = 1
    other = DATASETS.get("synthetic").load(cfg)
    assert not np.array_equal(a.train[0], other.train[0])  # another seed, other data


def test_digits_split_and_limit():
    source = DATASETS.get("digits").load(config("dataset.limit=100").dataset)
    assert source.num_train == 100 and source.num_val == 359
    assert source.input_shape == (8, 8, 1) and source.num_classes == 10


def test_npz_loads_a_user_file(tmp_path):
    path = tmp_path / "data.npz"
    rng = np.random.default_rng(0)
    np.savez(path, features=rng.normal(size=(50, 7)), labels=rng.integers(0, 3, 50))
    cfg = config("dataset=npz", f"dataset.path={path}", "dataset.x_key=features", "dataset.y_key=labels").dataset
    source = DATASETS.get("npz").load(cfg)
    assert source.kind == "tabular" and source.input_shape == (7,) and source.num_classes == 3


def test_npz_wrong_key_names_the_arrays_found(tmp_path):
    path = tmp_path / "data.npz"
    np.savez(path, a=np.zeros((4, 2)), b=np.zeros(4))
    cfg = config("dataset=npz", f"dataset.path={path}").dataset
    with pytest.raises(ConfigError, match=r"dataset.x_key='x'.*\['a', 'b'\]"):
        DATASETS.get("npz").load(cfg)


def test_image_folder_reads_class_folders(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for label in ("cats", "dogs"):
        (tmp_path / label).mkdir()
        for i in range(6):
            pixels = rng.integers(0, 255, size=(10, 12, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / label / f"{i}.png")
    cfg = config(
        "dataset=image_folder", f"dataset.path={tmp_path}", "dataset.image_size=[8,8]", "dataset.validation_split=0.25"
    ).dataset
    source = DATASETS.get("image_folder").load(cfg)
    assert source.num_classes == 2 and source.input_shape == (8, 8, 3)
    assert source.num_train + source.num_val == 12
    x, y = next(iter(source.pipeline("train", 4, True, 0)))
    assert x.shape == (4, 8, 8, 3)
    # Scaled to [0, 1] from random 0..254 pixels: not all zeros, not left at 0..255.
    assert 0.0 <= float(np.min(x)) < 0.1 and 0.9 < float(np.max(x)) <= 1.0


def test_image_folder_without_class_dirs_is_refused(tmp_path):
    cfg = config("dataset=image_folder", f"dataset.path={tmp_path}/missing").dataset
    with pytest.raises(ConfigError, match="one sub-directory of images per class"):
        DATASETS.get("image_folder").load(cfg)


def _image_source(channels: int):
    from launcher.train.data import DataSource

    return DataSource(None, None, 0, 0, (32, 32, channels), 10, "image")


def test_resnet_weights_never_download_and_say_where_imagenet_must_be(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    resnet = MODELS.get("resnet")
    cfg = config("model=resnet", "model.weights=imagenet").model
    with pytest.raises(ConfigError) as refused:
        resnet.check(cfg, _image_source(1))
    said = str(refused.value)
    assert f"{tmp_path}/keras/models/resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5 is missing" in said
    assert "a run never downloads" in said and "3-channel (RGB) images for ImageNet weights" in said
    missing = config("model=resnet", f"model.weights={tmp_path}/none.weights.h5").model
    with pytest.raises(ConfigError, match="model.weights=.*file not found"):
        resnet.check(missing, _image_source(3))
    resnet.check(config("model=resnet").model, _image_source(1))  # none: random weights, any channels


@pytest.mark.slow  # two ResNet50 backbones built
def test_resnet_starts_from_a_local_weights_file(tmp_path):
    import keras

    backbone = keras.applications.ResNet50(include_top=False, weights=None, input_shape=(32, 32, 3), pooling="avg")
    saved = tmp_path / "r50_notop.weights.h5"
    backbone.save_weights(saved)
    cfg = config("model=resnet", f"model.weights={saved}").model
    MODELS.get("resnet").check(cfg, _image_source(3))
    model = MODELS.get("resnet").build(cfg, _image_source(3))
    loaded = model.get_layer("resnet50")
    for mine, theirs in zip(loaded.get_weights(), backbone.get_weights(), strict=True):
        np.testing.assert_array_equal(mine, theirs)
