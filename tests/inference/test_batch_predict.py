"""Batch predictions (`mode=predict eval.input=...`): tables read in bounded chunks against the signature's own inputs
(`launcher.inference.batch_inputs`), image folders and TFRecord files through the signature that takes them
(`launcher.inference.batch_files`), answers written a chunk at a time (`launcher.inference.batch_outputs`), and
the orchestration (`launcher.inference.batch_predict`): which SavedModel answers, every refusal a ConfigError naming
the key, the value and the fix, never a silent wrong answer.

The SavedModel here is a tiny tf.Module with the three signatures a run's export may have: `serving_default` (uint8
pixels [n, 4, 4, 3]), `serving_images` (image bytes) and `serving_examples` (tf.Examples); a second has
serving_default alone, as an export without encoded ways in."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from launcher.config.errors import ConfigError
from launcher.inference import batch_files, batch_inputs, batch_outputs, batch_predict
from launcher.inference.batch_inputs import Spec

pytestmark = pytest.mark.unit

F32 = np.dtype("float32")


def digits_like(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((rows, 2, 3)).astype("float32")


def split_table(x: np.ndarray, **extra) -> pa.Table:
    flat = x.reshape(len(x), -1)
    return pa.table({**extra, **{f"x_{j}": flat[:, j] for j in range(flat.shape[1])}})


SPECS = {"x": Spec("x", (2, 3), F32)}


def chunks_of(opened) -> list:
    return list(opened.chunks)


# ------------------------------------------------------------------------------------------------ tables


def test_a_csv_of_split_columns_is_read_in_chunks_of_at_most_the_rows_asked_with_row_ids(tmp_path):
    x = digits_like(23)
    pcsv.write_csv(split_table(x, label=np.arange(23)), tmp_path / "in.csv")
    opened = batch_inputs.open_csv(tmp_path / "in.csv", SPECS, rows=5)
    chunks = chunks_of(opened)
    assert [len(c.ids) for c in chunks] == [5, 5, 5, 5, 3]
    assert np.concatenate([c.ids.to_numpy() for c in chunks]).tolist() == list(range(23))
    got = np.concatenate([c.inputs["x"] for c in chunks])
    assert got.dtype == np.float32 and got.shape == (23, 2, 3)
    np.testing.assert_array_equal(got, x)  # row-major: x_0..x_5 are [0,0],[0,1],[0,2],[1,0]...
    assert (opened.signature, opened.id_name, opened.unit) == ("serving_default", "row", "B")
    assert sum(c.advance for c in chunks) == (tmp_path / "in.csv").stat().st_size


def test_a_csv_larger_than_a_block_is_streamed_not_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(batch_inputs, "CSV_BLOCK_BYTES", 4096)
    x = digits_like(20000)
    pcsv.write_csv(split_table(x), tmp_path / "in.csv")
    size = (tmp_path / "in.csv").stat().st_size
    chunks = iter(batch_inputs.open_csv(tmp_path / "in.csv", SPECS, rows=64).chunks)
    first = next(chunks)
    assert len(first.ids) <= 64
    assert first.advance < size / 4  # the blocks read ahead (~135 kB), not the file (~1.3 MB)
    rest = list(chunks)
    assert max(len(c.ids) for c in rest) <= 64
    np.testing.assert_array_equal(np.concatenate([first.inputs["x"], *(c.inputs["x"] for c in rest)]), x)


def test_parquet_takes_split_columns_a_column_of_lists_or_nested_lists_and_an_id_column(tmp_path):
    x = digits_like(10)
    pq.write_table(split_table(x, key=[f"k{i}" for i in range(10)]), tmp_path / "split.parquet")
    flat = pa.array(list(x.reshape(10, -1)), pa.list_(pa.float64()))
    nested = pa.array([row.tolist() for row in x], pa.list_(pa.list_(pa.float32())))
    pq.write_table(pa.table({"x": flat}), tmp_path / "lists.parquet")
    pq.write_table(pa.table({"x": nested}), tmp_path / "nested.parquet")
    for name, ids in (("split", "key"), ("lists", ""), ("nested", "")):
        opened = batch_inputs.open_parquet(tmp_path / f"{name}.parquet", SPECS, ids, rows=4)
        chunks = chunks_of(opened)
        assert [len(c.ids) for c in chunks] == [4, 4, 2]
        np.testing.assert_array_equal(np.concatenate([c.inputs["x"] for c in chunks]), x)
        assert opened.id_name == (ids or "row") and opened.total == 10
    keyed = batch_inputs.open_parquet(tmp_path / "split.parquet", SPECS, "key", rows=4)
    assert next(keyed.chunks).ids.to_pylist() == ["k0", "k1", "k2", "k3"]


def test_several_named_inputs_of_their_own_dtypes(tmp_path):
    specs = {"num": Spec("num", (2,), F32), "code": Spec("code", (), np.dtype("int32"))}
    pcsv.write_csv(pa.table({"code": [3, 1], "num_0": [0.5, 1.5], "num_1": [2.0, 3.0]}), tmp_path / "in.csv")
    (chunk,) = chunks_of(batch_inputs.open_csv(tmp_path / "in.csv", specs))
    assert chunk.inputs["code"].dtype == np.int32 and chunk.inputs["code"].tolist() == [3, 1]
    np.testing.assert_array_equal(chunk.inputs["num"], [[0.5, 2.0], [1.5, 3.0]])


def test_missing_columns_are_named_with_the_columns_present(tmp_path):
    table = split_table(digits_like(3)).drop(["x_4", "x_5"]).append_column("label", pa.array([1, 2, 3]))
    pcsv.write_csv(table, tmp_path / "in.csv")
    with pytest.raises(ConfigError, match=r"eval.input=.*missing: x_4, x_5; present: x_0..x_3 \(4\), label") as err:
        batch_inputs.open_csv(tmp_path / "in.csv", SPECS)
    assert "'x': x_0..x_5 (6 float32 values a row, row-major for shape [2, 3])" in str(err.value)
    assert "fix: add the missing columns" in str(err.value)


def test_an_unknown_ids_column_is_refused_naming_the_columns(tmp_path):
    pcsv.write_csv(split_table(digits_like(3)), tmp_path / "in.csv")
    with pytest.raises(ConfigError, match=r"eval.ids='id': expected a column of .*x_0..x_5 \(6\)"):
        batch_inputs.open_csv(tmp_path / "in.csv", SPECS, "id")


@pytest.mark.parametrize(
    "column, match",
    [
        (["a", "b"], r"column 'x_2' is string: input 'x' takes float32 numbers"),
        (
            [1.0, None],
            r"eval.input=.*in.parquet': expected column 'x_2' at row 1: a value in every row \(this one is empty\)",
        ),
    ],
)
def test_text_or_empty_cells_where_numbers_go_are_refused_naming_the_column(tmp_path, column, match):
    table = split_table(digits_like(2))
    table = table.set_column(2, "x_2", pa.array(column))
    pq.write_table(table, tmp_path / "in.parquet")
    with pytest.raises(ConfigError, match=match):
        chunks_of(batch_inputs.open_parquet(tmp_path / "in.parquet", SPECS))


def test_fractions_for_an_integer_input_are_refused_never_truncated(tmp_path):
    specs = {"ids": Spec("ids", (), np.dtype("int32"))}
    pq.write_table(pa.table({"ids": [1.0, 2.0, 2.5]}), tmp_path / "in.parquet")
    with pytest.raises(ConfigError, match=r"column 'ids' at row 2: whole numbers .* it holds 2.5"):
        chunks_of(batch_inputs.open_parquet(tmp_path / "in.parquet", specs))
    (tmp_path / "in.csv").write_text("ids\n1\n2\n2.5\n")
    with pytest.raises(ConfigError, match=r"numbers in column 'ids' \(input 'ids' takes int32\); it holds '2.5'"):
        chunks_of(batch_inputs.open_csv(tmp_path / "in.csv", specs))
    pq.write_table(pa.table({"ids": [1, 300]}), tmp_path / "big.parquet")
    with pytest.raises(ConfigError, match=r"whole numbers in 0..255 \(uint8\); it holds 300"):
        chunks_of(batch_inputs.open_parquet(tmp_path / "big.parquet", {"ids": Spec("ids", (), np.dtype("uint8"))}))


def test_a_list_column_of_the_wrong_length_is_refused(tmp_path):
    pq.write_table(pa.table({"x": pa.array([[1.0] * 6, [1.0] * 5])}), tmp_path / "in.parquet")
    with pytest.raises(ConfigError, match=r"column 'x' at row 1: lists of one length"):
        chunks_of(batch_inputs.open_parquet(tmp_path / "in.parquet", SPECS))


def test_what_an_input_is_and_eval_input_problems(tmp_path):
    (tmp_path / "a.csv.gz").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("")
    assert batch_inputs.input_kind(tmp_path / "a.csv.gz") == "csv"
    assert batch_inputs.input_kind(tmp_path / "b.pq") == "parquet"
    assert batch_inputs.input_kind(tmp_path / "s.tfrecord.gz") == "tfrecord"
    assert batch_inputs.input_problems("nothing.csv", tmp_path / "nothing.csv", "")[0].key == "eval.input"
    (wrong,) = batch_inputs.input_problems("notes.txt", tmp_path / "notes.txt", "")
    assert "a .csv or .parquet table" in wrong.expected and ".txt" in wrong.expected
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "a.png").write_bytes(b"")
    (ids,) = batch_inputs.input_problems("pics", tmp_path / "pics", "id")
    assert ids.key == "eval.ids" and "named by file" in ids.expected
    assert batch_outputs.output_problems("out.json")[0].fix == "eval.output=out.parquet"
    config = SimpleNamespace(input="pics", ids="", output="predictions.npz")
    assert batch_predict.problems(config, tmp_path, "predict") == []
    (refused,) = batch_predict.problems(config, tmp_path, "eval")
    assert refused.key == "eval.input" and refused.fix == "mode=predict, or drop eval.input"


# ------------------------------------------------------------------------------------------------ writers


ANSWER = {
    "probabilities": np.array([[0.25, 0.75], [0.5, 0.5]], "float32"),
    "label": np.array([b"cat", b"dog"], dtype=object),
}


def write_two_chunks(path: Path, id_name: str = "row") -> Path:
    writer = batch_outputs.Writer(path, id_name)
    writer.write(pa.array([0, 1]), ANSWER)
    writer.write(pa.array([2, 3]), ANSWER)
    assert not path.exists() and writer.partial.exists() == (path.suffix != ".npz")
    return writer.close()


def test_parquet_output_has_the_id_then_each_served_key_vectors_as_lists(tmp_path):
    table = pq.read_table(write_two_chunks(tmp_path / "p.parquet"))
    assert table.column_names == ["row", "probabilities", "label"]
    assert table.column("row").to_pylist() == [0, 1, 2, 3]
    assert table.column("label").to_pylist() == ["cat", "dog", "cat", "dog"]
    assert table.column("probabilities").to_pylist()[1] == [0.5, 0.5]
    assert pq.ParquetFile(tmp_path / "p.parquet").metadata.num_row_groups == 2  # written as it came


def test_csv_output_flattens_vectors_and_npz_gathers_them(tmp_path):
    lines = write_two_chunks(tmp_path / "p.csv").read_text().splitlines()
    assert lines[0] == '"row","probabilities_0","probabilities_1","label"'
    assert lines[1:3] == ['0,0.25,0.75,"cat"', '1,0.5,0.5,"dog"'] and len(lines) == 5
    saved = np.load(write_two_chunks(tmp_path / "p.npz", "file"))  # no pickle needed
    assert saved["file"].tolist() == [0, 1, 2, 3] and saved["label"].tolist() == ["cat", "dog"] * 2
    assert saved["probabilities"].shape == (4, 2)


def test_a_split_s_predictions_are_the_served_answer_with_the_target_beside_it(tmp_path):
    """One answer format on every path: `mode=predict` on a split writes what every artifact serves (`Task.served`,
    the columns file predictions and the server answer), then the split's label as `target`, through the same
    writer (a vector as `<key>_<j>` in CSV)."""
    from launcher.inference.evaluate import split_answer
    from launcher.train.tasks import Heads, Task

    logits = np.array([[2.0, 0.0, -1.0], [0.0, 3.0, 0.0]], "float32")
    named = Task("classification", None, class_names=("cat", "dog", "eel"), units=3)
    answer = split_answer(named, logits, np.array([0, 2]))
    assert list(answer) == [*named.served(logits), "target"] == ["probabilities", "label", "label_id", "target"]
    assert answer["label"].tolist() == [b"cat", b"dog"] and answer["label_id"].tolist() == [0, 1]
    np.testing.assert_allclose(answer["probabilities"].sum(axis=-1), 1.0, rtol=1e-6)
    heads = Heads({"kind": Task("classification", None), "size": Task("regression", None)}, {}, ["kind", "size"])
    outputs = {"kind": logits, "size": np.array([[1.5], [2.5]], "float32")}
    both = split_answer(heads, outputs, {"kind": np.array([0, 1]), "size": np.array([1.0, 2.0])})
    assert list(both) == ["kind_probabilities", "kind_label", "size_values", "kind_target", "size_target"]
    writer = batch_outputs.Writer(tmp_path / "p.csv", "row")
    writer.write(pa.array([0, 1]), both)
    header = writer.close().read_text().splitlines()[0].replace('"', "").split(",")
    assert header == ["row", *(f"kind_probabilities_{j}" for j in range(3)), "kind_label", "size_values_0"] + [
        "kind_target",
        "size_target",
    ]


def test_an_aborted_output_leaves_no_file(tmp_path):
    writer = batch_outputs.Writer(tmp_path / "p.parquet", "row")
    writer.write(pa.array([0, 1]), ANSWER)
    writer.abort()
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ a SavedModel


def save_module(path: Path, encoded: bool) -> Path:
    """serving_default: uint8 [n, 4, 4, 3] -> probabilities (2 classes by mean brightness) and label; with
    `encoded`, serving_images (bytes, decoded and resized to 4x4) and serving_examples (a `pixels` feature)."""
    import tensorflow as tf

    class Served(tf.Module):
        def answer(self, pixels):
            mean = tf.reduce_mean(tf.cast(pixels, tf.float32), axis=[1, 2, 3]) / 255.0
            probabilities = tf.stack([1.0 - mean, mean], axis=-1)
            return {"probabilities": probabilities, "label": tf.argmax(probabilities, -1, output_type=tf.int32)}

        @tf.function(input_signature=[tf.TensorSpec([None, 4, 4, 3], tf.uint8, name="inputs")])
        def serve(self, inputs):
            return self.answer(inputs)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="images")])
        def images(self, images):
            def one(data):
                image = tf.io.decode_image(data, channels=3, expand_animations=False)
                image.set_shape([None, None, 3])
                return tf.image.resize(image, (4, 4))

            decoded = tf.map_fn(one, images, fn_output_signature=tf.TensorSpec([4, 4, 3], tf.float32))
            return self.answer(tf.cast(tf.clip_by_value(tf.round(decoded), 0, 255), tf.uint8))

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def examples(self, examples):
            parsed = tf.io.parse_example(examples, {"pixels": tf.io.FixedLenFeature([48], tf.int64)})
            return self.answer(tf.cast(tf.reshape(parsed["pixels"], [-1, 4, 4, 3]), tf.uint8))

    module = Served()
    signatures = {"serving_default": module.serve}
    if encoded:
        signatures.update(serving_images=module.images, serving_examples=module.examples)
    tf.saved_model.save(module, str(path), signatures=signatures)
    return path


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    import tensorflow as tf

    folder = tmp_path_factory.mktemp("saved")
    return {
        encoded: tf.saved_model.load(str(save_module(folder / f"model_{encoded}", encoded)))
        for encoded in (True, False)
    }


def pixels(count: int, size: int = 4) -> np.ndarray:
    return np.random.default_rng(1).integers(0, 256, (count, size, size, 3), dtype=np.uint8)


def image_folder(folder: Path, count: int, size: int = 4) -> np.ndarray:
    import tensorflow as tf

    images = pixels(count, size)
    for i, image in enumerate(images):
        sub = folder / ("a" if i % 2 else "b")
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"{i:02d}.png").write_bytes(tf.io.encode_png(image).numpy())
    return images


def run(saved_model, path: Path, output: Path, ids: str = "") -> tuple[int, object]:
    opened = batch_predict.open_input(path, saved_model.signatures, ids)
    count = batch_predict.predict(
        saved_model.signatures[opened.signature], opened, batch_outputs.Writer(output, opened.id_name)
    )
    return count, opened


def serve_default(saved_model, inputs: np.ndarray) -> dict:
    import tensorflow as tf

    return {k: v.numpy() for k, v in saved_model.signatures["serving_default"](inputs=tf.constant(inputs)).items()}


@pytest.mark.parametrize("encoded", [True, False], ids=["serving_images", "decoded_here"])
def test_an_image_folder_is_answered_by_file_name_as_serving_default_answers_its_pixels(
    saved, tmp_path, encoded, monkeypatch
):
    monkeypatch.setattr(batch_files, "IMAGE_ROWS", 3)
    images = image_folder(tmp_path / "pics", 7, size=4 if encoded else 4)
    (tmp_path / "pics" / "notes.txt").write_text("not an image: skipped")
    count, opened = run(saved[encoded], tmp_path / "pics", tmp_path / "out.parquet")
    assert count == 7 and opened.signature == ("serving_images" if encoded else "serving_default")
    table = pq.read_table(tmp_path / "out.parquet")
    names = table.column("file").to_pylist()
    assert names == sorted(names) and names[0] == "a/01.png" and len(names) == 7
    order = [int(Path(n).stem) for n in names]
    want = serve_default(saved[encoded], images[order])
    np.testing.assert_array_equal(
        np.stack(table.column("probabilities").to_numpy(zero_copy_only=False)), want["probabilities"]
    )
    assert table.column("label").to_pylist() == want["label"].tolist()


def test_images_of_another_size_are_resized_to_the_input_s_when_decoded_here(saved, tmp_path):
    image_folder(tmp_path / "pics", 2, size=8)
    count, _ = run(saved[False], tmp_path / "pics", tmp_path / "out.csv")
    assert count == 2 and len((tmp_path / "out.csv").read_text().splitlines()) == 3


@pytest.mark.parametrize("encoded", [True, False], ids=["serving_images", "decoded_here"])
def test_an_undecodable_image_is_refused_naming_the_file_and_no_output_is_left(saved, tmp_path, encoded):
    image_folder(tmp_path / "pics", 5)
    (tmp_path / "pics" / "b" / "02.png").write_bytes(b"not a png at all")
    with pytest.raises(
        ConfigError,
        match=r"(?s)eval.input=.*pics'.*b/02.png is not one \(Unknown image file format.*fix: remove or re-encode",
    ):
        run(saved[encoded], tmp_path / "pics", tmp_path / "out.parquet")
    assert not (tmp_path / "out.parquet").exists() and not (tmp_path / "out.parquet.partial").exists()


def write_examples(path: Path, images: np.ndarray) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for image in images:
            feature = tf.train.Feature(int64_list=tf.train.Int64List(value=image.reshape(-1).tolist()))
            writer.write(tf.train.Example(features=tf.train.Features(feature={"pixels": feature})).SerializeToString())


def test_tfrecord_files_go_to_serving_examples_numbered_across_files(saved, tmp_path):
    images = pixels(5)
    (tmp_path / "shards").mkdir()
    write_examples(tmp_path / "shards" / "s0.tfrecord", images[:3])
    write_examples(tmp_path / "shards" / "s1.tfrecord", images[3:])
    count, opened = run(saved[True], tmp_path / "shards", tmp_path / "out.npz")
    assert count == 5 and opened.signature == "serving_examples"
    written = np.load(tmp_path / "out.npz")
    assert written["record"].tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(written["probabilities"], serve_default(saved[True], images)["probabilities"])


def test_tfrecord_without_serving_examples_and_a_bad_record_are_refused(saved, tmp_path):
    write_examples(tmp_path / "in.tfrecord", pixels(2))
    with pytest.raises(ConfigError, match=r"it has no serving_examples signature .*only serving_default"):
        run(saved[False], tmp_path / "in.tfrecord", tmp_path / "out.parquet")
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(tmp_path / "bad.tfrecord")) as writer:
        writer.write(tf.train.Example().SerializeToString())  # no pixels feature
    with pytest.raises(ConfigError, match=r"it refused record 0 of bad.tfrecord"):
        run(saved[True], tmp_path / "bad.tfrecord", tmp_path / "out.parquet")
    (tmp_path / "junk.tfrecord").write_bytes(b"\x01" * 40)
    with pytest.raises(ConfigError, match=r"junk.tfrecord is not one, or is damaged"):
        run(saved[True], tmp_path / "junk.tfrecord", tmp_path / "out.parquet")


def test_a_table_is_answered_by_serving_default_and_an_empty_one_is_refused(saved, tmp_path):
    images = pixels(6)
    flat = images.reshape(6, -1)
    pcsv.write_csv(pa.table({f"inputs_{j}": flat[:, j] for j in range(48)}), tmp_path / "in.csv")
    count, _ = run(saved[True], tmp_path / "in.csv", tmp_path / "out.parquet")
    got = pq.read_table(tmp_path / "out.parquet").column("probabilities").to_numpy(zero_copy_only=False)
    np.testing.assert_array_equal(np.stack(got), serve_default(saved[True], images)["probabilities"])
    (tmp_path / "empty.csv").write_text(",".join(f"inputs_{j}" for j in range(48)) + "\n")
    with pytest.raises(ConfigError, match=r"expected examples to predict \(csv with none\)"):
        run(saved[True], tmp_path / "empty.csv", tmp_path / "empty.parquet")
    assert not (tmp_path / "empty.parquet").exists()


def test_the_run_s_own_savedmodel_answers_its_final_model_any_other_is_exported_first(tmp_path, monkeypatch):
    exported = []
    monkeypatch.setattr(batch_predict, "served_inputs", lambda data, model: ("inputs of", data, model))
    monkeypatch.setattr(batch_predict, "export_saved_model", lambda *args: exported.append(args))
    train, run_dir = tmp_path / "train", tmp_path / "run"
    (train / "saved_model").mkdir(parents=True)
    (train / "saved_model" / "saved_model.pb").write_bytes(b"")
    assert batch_predict.saved_model(train, run_dir, "final", lambda: ("m", "t"), "data") == train / "saved_model"
    assert exported == []
    assert batch_predict.saved_model(train, run_dir, "best", lambda: ("m", "t"), "data") == run_dir / "saved_model"
    assert exported == [("m", "t", ("inputs of", "data", "m"), run_dir / "saved_model")]
    assert batch_predict.output_name("predictions.npz") == "predictions.parquet"
    assert batch_predict.output_name("mine.npz") == "mine.npz"


def test_predict_input_writes_the_output_and_a_summary_to_log(saved, tmp_path, monkeypatch):
    train = tmp_path / "train"
    save_module(train / "saved_model", encoded=True)
    flat = pixels(3).reshape(3, -1)
    pq.write_table(
        pa.table({"id": ["a", "b", "c"], **{f"inputs_{j}": flat[:, j] for j in range(48)}}), tmp_path / "in.pq"
    )
    config = SimpleNamespace(input="in.pq", ids="id", output="predictions.npz", model="final")
    metrics, files = batch_predict.predict_input(config, train, tmp_path / "run", tmp_path, None, None)
    assert metrics["input_examples"] == 3.0 and [f.name for f in files] == ["predictions.parquet", "batch.json"]
    summary = json.loads(files[1].read_text())
    assert summary["saved_model"] == str(train / "saved_model") and summary["signature"] == "serving_default"
    assert pq.read_table(files[0]).column("id").to_pylist() == ["a", "b", "c"]
    assert batch_predict._progress(SimpleNamespace(unit="B", total=1)) is None  # no terminal: no bar


def test_a_folder_of_images_for_float_pixels_without_serving_images_is_refused_not_guessed(tmp_path):
    """Scaled to [0, 1]? to [-1, 1]? Only the data pipeline knew: decoding here would be a silent wrong answer."""
    specs = {"serving_default": {"inputs": Spec("inputs", (4, 4, 3), F32)}}
    (tmp_path / "a.png").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"takes image files \(serving_images\) or uint8 pixels"):
        batch_files.open_images(tmp_path, specs)


def test_an_id_column_named_like_an_answer_is_refused_not_overwritten(tmp_path):
    writer = batch_outputs.Writer(tmp_path / "p.parquet", "label")
    with pytest.raises(ConfigError, match=r"eval.ids='label'.*named unlike the model's answers \['label'"):
        writer.write(pa.array([1, 2]), {"label": np.array([0, 1]), "probabilities": np.zeros((2, 2), "float32")})
