"""TFRecord shards: the converter's output read back exactly (arrays) and decoded (image folders)."""

from __future__ import annotations

import numpy as np
from launcher_datasets.to_tfrecord import convert, main
from support.config import config

from launcher.train.registry import DATASETS


def test_npz_shards_hold_every_example_exactly_with_counts_in_dataset_json(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(50, 4, 3)).astype("float32"), rng.integers(0, 5, size=50)
    np.savez(tmp_path / "data.npz", x=x, y=y)
    meta = convert(tmp_path / "data.npz", tmp_path / "out", shards=4, validation_split=0.2)
    assert meta["splits"]["train"]["counts"] == [10, 10, 10, 10] and meta["splits"]["val"]["counts"] == [10]
    source = DATASETS.get("tfrecord").load(config("dataset=tfrecord", f"dataset.train={tmp_path}/out/train-*").dataset)
    assert (source.num_train, source.num_val, source.num_classes) == (40, 10, 5)
    assert source.input_shape == (4, 3) and source.kind == "tabular" and source.train_shards == (10, 10, 10, 10)
    read = list(source._dataset("train").as_numpy_iterator()) + list(source._dataset("val").as_numpy_iterator())
    got = sorted((float(xi.sum()), int(yi)) for xi, yi in read)
    assert got == sorted((float(xi.sum()), int(yi)) for xi, yi in zip(x, y, strict=True))


def test_an_image_folder_becomes_shards_decoded_and_resized_in_tf_data(tmp_path, capsys):
    from PIL import Image

    rng = np.random.default_rng(0)
    for label in ("cats", "dogs", "owls"):
        (tmp_path / "images" / label).mkdir(parents=True)
        for i in range(8):
            Image.fromarray(rng.integers(0, 255, size=(10, 12, 3), dtype=np.uint8)).save(
                tmp_path / "images" / label / f"{i}.png"
            )
    assert main([str(tmp_path / "images"), str(tmp_path / "out"), "--shards", "3", "--image-size", "8", "8"]) == 0
    assert "python -m launcher dataset=tfrecord" in capsys.readouterr().out
    source = DATASETS.get("tfrecord").load(config("dataset=tfrecord", f"dataset.train={tmp_path}/out/train-*").dataset)
    assert source.num_classes == 3 and source.input_shape == (8, 8, 3) and source.kind == "image"
    assert source.num_train + source.num_val == 24 and len(source.train_shards) == 3
    x, y = next(iter(source.pipeline("train", 4, True, 0)))
    assert x.shape == (4, 8, 8, 3) and set(np.asarray(y).tolist()) <= {0, 1, 2}
    assert float(np.min(x)) >= 0.0 and float(np.max(x)) <= 1.0 and float(np.max(x)) > 0.5


def test_the_converter_refuses_a_missing_source_with_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "nothing.npz"), str(tmp_path / "out")]) == 2
    assert "an existing .npz file or a folder of class sub-folders" in capsys.readouterr().err


def test_every_export_parses_serialized_examples_inside_the_model_as_training_read_them(tmp_path):
    """`serving_examples(examples)` of an image-encoded shard: the same answer as `serving_default` on the
    features the training pipeline decoded from the same records (`launcher.export.serving`)."""
    import keras
    import tensorflow as tf
    from PIL import Image

    from launcher.export.serving import export_saved_model, served_inputs
    from launcher.train.tasks import Task

    rng = np.random.default_rng(1)
    for label in ("cats", "dogs"):
        (tmp_path / "images" / label).mkdir(parents=True)
        for i in range(6):
            Image.fromarray(rng.integers(0, 255, size=(10, 12, 3), dtype=np.uint8)).save(
                tmp_path / "images" / label / f"{i}.png"
            )
    main([str(tmp_path / "images"), str(tmp_path / "out"), "--shards", "2", "--image-size", "8", "8"])
    source = DATASETS.get("tfrecord").load(config("dataset=tfrecord", f"dataset.train={tmp_path}/out/train-*").dataset)
    inputs = keras.Input((8, 8, 3))
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(inputs)))
    served = served_inputs(source, model)
    export_saved_model(model, Task("classification", None), served, tmp_path / "saved_model")
    loaded = tf.saved_model.load(str(tmp_path / "saved_model"))
    records = served.example(source, 4, "serving_examples")["examples"]
    from_records = loaded.signatures["serving_examples"](examples=tf.constant(records))
    features = next(iter(source.pipeline("val", 4, False, None)))[0]
    from_features = loaded.signatures["serving_default"](inputs=features)
    np.testing.assert_allclose(from_records["probabilities"].numpy(), from_features["probabilities"].numpy(), atol=1e-6)
    assert from_records["label"].shape == (len(records),) and len(records) >= 2
