"""An image-folder run's exports take what a client holds: JPEG or PNG bytes of any size (`serving_images`) or
uint8 pixels at the training size (`serving_default`), decode, resize and scale them inside the model as training
did (`launcher.train.preprocessing`), and answer the class by its folder's name; the MLflow model takes the bytes
(`launcher.export.serving`, `launcher.export.mlflow_model`)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from support.config import TINY
from support.tracking import store
from support.train import predicted_in_process, shipped_in_process

CLASSES = ("cats", "dogs", "owls")


def image_folder(root, count: int = 8):
    """Three classes of 12x10 images, each class a colour, half PNG half JPEG."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for index, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True)
        for i in range(count):
            pixels = rng.integers(0, 60, size=(10, 12, 3)).astype("uint8")
            pixels[..., index] += 180
            Image.fromarray(pixels).save(root / name / f"{i}.{'png' if i % 2 else 'jpg'}")
    return root


@pytest.fixture(scope="module")
def trained(tmp_path_factory):

    folder = tmp_path_factory.mktemp("images")
    given = [
        *[o for o in TINY if not o.startswith("dataset.")],
        "dataset=image_folder",
        f"dataset.path={image_folder(folder / 'images')}",
        "dataset.image_size=[8,8]",
        "dataset.validation_split=0.25",
        "model=mlp",
        "train.epochs=3",
        "scaling.batch_size=8",
        "precision=fp32",  # the same numbers in every process: what differs is only the preprocessing
        "export.formats=[keras,saved_model,tflite]",
    ]
    outcome, given = shipped_in_process(folder, *given)
    return outcome, folder, given


def jpeg(pixels: np.ndarray) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=95)
    return out.getvalue()


@pytest.mark.xdist_group("served-images")  # one test process trains the module's run once
@pytest.mark.slow  # a short training in this process
def test_encoded_images_and_pixels_get_the_answer_training_gives_and_the_class_by_name(trained):
    import tensorflow as tf

    outcome, folder, _ = trained
    files = sorted((folder / "images" / "owls").iterdir())[:4]
    encoded = [path.read_bytes() for path in files]
    loaded = tf.saved_model.load(str(folder / "run" / "saved_model"))
    from_bytes = loaded.signatures["serving_images"](images=tf.constant(encoded))
    # The same files as training read them: decoded, resized to 8x8 (bilinear) and scaled by the data pipeline.
    pixels = tf.stack([tf.image.resize(tf.io.decode_image(b, channels=3), (8, 8)) for b in encoded])
    trained_probabilities = tf.nn.softmax(outcome.model(pixels / 255.0, training=False)).numpy()
    np.testing.assert_allclose(from_bytes["probabilities"].numpy(), trained_probabilities, atol=1e-6)
    names = [name.decode() for name in from_bytes["label"].numpy()]
    assert set(names) <= set(CLASSES)
    assert names == [CLASSES[i] for i in from_bytes["label_id"].numpy()]
    # uint8 pixels at the training size: the served function scales them as training did.
    uint8 = tf.cast(tf.round(pixels), tf.uint8)
    from_pixels = loaded.signatures["serving_default"](inputs=uint8)
    want = tf.nn.softmax(outcome.model(tf.cast(uint8, tf.float32) / 255.0, training=False)).numpy()
    np.testing.assert_allclose(from_pixels["probabilities"].numpy(), want, atol=1e-6)


@pytest.mark.xdist_group("served-images")
@pytest.mark.slow
def test_an_image_of_another_size_is_resized_inside_the_model(trained):
    import tensorflow as tf

    _, folder, _ = trained
    big = np.zeros((40, 48, 3), "uint8")
    big[..., 2] = 230  # an owl's colour
    served = tf.saved_model.load(str(folder / "run" / "saved_model")).signatures["serving_images"]
    answer = served(images=tf.constant([jpeg(big)]))
    assert answer["probabilities"].shape == (1, 3)


@pytest.mark.xdist_group("served-images")
@pytest.mark.slow
def test_the_mlflow_model_takes_image_bytes_and_answers_as_the_savedmodel(trained):
    import mlflow.pyfunc
    import pandas as pd
    import tensorflow as tf
    from mlflow.exceptions import MlflowException
    from mlflow.models import Model

    _, folder, _ = trained
    directory = folder / "run" / "mlflow_model"
    assert Model.load(str(directory)).signature.inputs.input_names() == ["images"]
    encoded = [path.read_bytes() for path in sorted((folder / "images" / "dogs").iterdir())[:3]]
    answered = mlflow.pyfunc.load_model(str(directory)).predict(pd.DataFrame({"images": encoded}))
    want = tf.saved_model.load(str(folder / "run" / "saved_model")).signatures["serving_images"](
        images=tf.constant(encoded)
    )
    np.testing.assert_array_equal(answered["probabilities"], want["probabilities"].numpy())
    assert list(answered["label"]) == [name.decode() for name in want["label"].numpy()]
    with pytest.raises(MlflowException, match="could not read the request"):
        mlflow.pyfunc.load_model(str(directory)).predict(pd.DataFrame({"images": [b"not an image"]}))


@pytest.mark.xdist_group("served-images")
@pytest.mark.slow
def test_tflite_takes_uint8_pixels(trained):
    import tensorflow as tf

    _, folder, _ = trained
    runner = tf.lite.Interpreter(model_path=str(folder / "run" / "model.tflite")).get_signature_runner()
    pixels = np.full((2, 8, 8, 3), 200, "uint8")
    lite = runner(inputs=pixels)
    saved = tf.saved_model.load(str(folder / "run" / "saved_model")).signatures["serving_default"](
        inputs=tf.constant(pixels)
    )
    np.testing.assert_allclose(lite["probabilities"], saved["probabilities"].numpy(), atol=1e-5)


@pytest.mark.xdist_group("served-images")
@pytest.mark.slow  # a real server: ~10 s to start
def test_mlflow_models_serve_and_predict_take_jpeg_bytes_alike_and_a_file_that_is_not_an_image_gets_400(
    trained, tmp_path
):
    """A real `mlflow models serve` fed base64 JPEG/PNG bytes, `serving_images` and `mode=predict` on the folder
    of the same files give one answer to the bit (TFLite takes pixels: `test_tflite_takes_uint8_pixels`).

    All three answer the whole folder at once: `mode=predict` reads up to 64 files a call. A batch of another size
    can differ in the last bit (the CPU's matmul kernels block by batch: 6e-8 on an AVX2-only AMD EPYC), so the
    first four files answered alone are held to 1e-6, not to the bit."""
    import base64
    import json

    import pyarrow.parquet as pq
    import tensorflow as tf
    from support.serving import invoke, mlflow_server

    _, folder, given = trained
    files = sorted((folder / "images" / "cats").iterdir())
    encoded = [path.read_bytes() for path in files]
    sent = [[base64.b64encode(data).decode()] for data in encoded]
    with mlflow_server(str(folder / "run" / "mlflow_model"), store(folder / "mlflow.db"), tmp_path / "log") as port:
        answered = json.loads(invoke(port, {"dataframe_split": {"columns": ["images"], "data": sent}}).read())
        bad = [[base64.b64encode(b"not an image").decode()]]
        refused = invoke(port, {"dataframe_split": {"columns": ["images"], "data": bad}})
        refusal = (refused.status, json.loads(refused.read())["message"])
    serving_images = tf.saved_model.load(str(folder / "run" / "saved_model")).signatures["serving_images"]
    want = serving_images(images=tf.constant(encoded))
    predictions = answered["predictions"]
    np.testing.assert_array_equal(np.array(predictions["probabilities"], "float32"), want["probabilities"].numpy())
    assert predictions["label"] == [name.decode() for name in want["label"].numpy()]
    assert refusal[0] == 400 and "the model could not read the request" in refusal[1]
    predicted_in_process(folder, given, tmp_path / "predict", f"eval.input={folder / 'images' / 'cats'}")
    table = pq.read_table(tmp_path / "predict" / "predictions.parquet")
    assert table.num_rows == len(encoded) and table.column("file").to_pylist() == [p.name for p in files]
    by_predict = np.stack(table.column("probabilities").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(by_predict, want["probabilities"].numpy())
    assert table.column("label").to_pylist() == predictions["label"]
    four = serving_images(images=tf.constant(encoded[:4]))
    np.testing.assert_allclose(four["probabilities"].numpy(), by_predict[:4], rtol=0, atol=1e-6)


def test_a_model_with_its_own_rescaling_gets_the_pixels_unscaled_and_the_plan_says_which_side_scales():
    """Issue 63, item 6: dataset=image_folder divided by 255 before a keras.io model's own Rescaling(1/255)."""
    from types import SimpleNamespace

    import keras
    import user_parts

    from launcher.train.model_io import ModelSpec
    from launcher.train.preprocessing import image_preprocessing, pixel_scaling

    spec = ModelSpec((4, 4, 3), "float32", 2, "classification", "image")
    pixels = {"inputs": np.full((1, 4, 4, 3), 200, "uint8")}
    own = SimpleNamespace(preprocessing=image_preprocessing(4, 4, 3, list))
    side, reason = pixel_scaling(user_parts.rescaled(spec), own)
    assert side == "model" and "Rescaling (rescale)" in reason
    np.testing.assert_allclose(own.preprocessing.prepare(pixels)["inputs"], 200.0)  # as they are: the model scales
    assert own.preprocessing.encoded and own.preprocessing.raw == {"inputs": "uint8"}  # the same ways in
    plain = SimpleNamespace(preprocessing=image_preprocessing(4, 4, 3, list))
    inputs = keras.Input((4, 4, 3))
    assert pixel_scaling(keras.Model(inputs, keras.layers.Dense(2)(inputs)), plain)[0] == "data"
    np.testing.assert_allclose(plain.preprocessing.prepare(pixels)["inputs"], 200.0 / 255, rtol=1e-6)
    assert pixel_scaling(user_parts.rescaled(spec), SimpleNamespace(preprocessing=None)) is None  # not images


@pytest.mark.slow  # a short training and its exports in this process
def test_a_model_that_rescales_itself_trains_and_serves_on_raw_pixels(tmp_path):
    import tensorflow as tf

    from launcher.plan.decisions import InputsPlan

    given = [
        "dataset=image_folder",
        f"dataset.path={image_folder(tmp_path / 'images')}",
        "dataset.image_size=[8,8]",
        "dataset.validation_split=0.25",
        "model=custom",
        "model.builder=user_parts:rescaled",
        "train.epochs=1",
        "scaling.batch_size=8",
        "precision=fp32",
        "export.formats=[keras,saved_model]",
    ]
    outcome, _ = shipped_in_process(tmp_path, *given)
    assert outcome.plan.values()["data.pixels"] == "model"
    assert "never /255 first" in outcome.plan.record(InputsPlan).reason("pixels")
    files = sorted((tmp_path / "images" / "owls").iterdir())[:3]
    loaded = tf.saved_model.load(str(tmp_path / "run" / "saved_model"))
    served = loaded.signatures["serving_images"](images=tf.constant([p.read_bytes() for p in files]))
    pixels = tf.stack([tf.image.resize(tf.io.decode_image(p.read_bytes(), channels=3), (8, 8)) for p in files])
    want = tf.nn.softmax(outcome.model(pixels, training=False)).numpy()  # 0-255 pixels into the model, as trained
    np.testing.assert_allclose(served["probabilities"].numpy(), want, atol=1e-6)


@pytest.mark.slow  # a short training and its exports in this process
def test_a_loaders_raw_images_get_the_image_bytes_signature_as_an_image_folder_does(tmp_path):
    """Issue 63, item 6: a person's image loader got no image-bytes serving signature."""
    import tensorflow as tf
    import user_parts

    given = ["dataset=custom", "dataset.loader=user_parts:pixels", "model=mlp", "model.hidden_units=[8]"]
    outcome, _ = shipped_in_process(
        tmp_path,
        *given,
        "train.epochs=1",
        "scaling.batch_size=12",
        "precision=fp32",
        "export.formats=[keras,saved_model]",
    )
    assert outcome.plan.values()["data.pixels"] == "data"
    images = user_parts.pixels()["val"][0][:3]
    loaded = tf.saved_model.load(str(tmp_path / "run" / "saved_model"))
    served = loaded.signatures["serving_images"](images=tf.constant([tf.io.encode_png(i).numpy() for i in images]))
    want = tf.nn.softmax(outcome.model(images.astype("float32") / 255.0, training=False)).numpy()
    np.testing.assert_allclose(served["probabilities"].numpy(), want, atol=1e-6)
    from support.config import config

    from launcher.config.errors import ConfigError
    from launcher.train.registry import DATASETS

    cfg = config("dataset=custom", "dataset.loader=user_parts:shifted_raw").dataset
    with pytest.raises(ConfigError, match=r'"raw_images": True beside one feature array of images.*x is \(3,\)'):
        DATASETS.get("custom").load(cfg)
