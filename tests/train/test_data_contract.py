"""The data contract: (x, y) or (x, y, sample_weight), x an array, a tuple or a dict of named features, y an array
or a dict by head. Every array of an example travels together through splitting, shuffling, limit, test_split,
the pipeline and sharding; every refusal names the feature, head or weight, before anything is written. Shapes
tf.data leaves unknown are read from the examples: `launcher.train.example_shapes`."""

from __future__ import annotations

import numpy as np
import pytest
from support.config import TINY, compose, config
from support.tracking import runs_in

from launcher.config.errors import ConfigError
from launcher.train.labels import fit_to_task
from launcher.train.registry import DATASETS

HEADS = {"kind": "classification", "size": "regression"}


def _load(loader: str, *overrides: str):
    return DATASETS.get("custom").load(
        config("dataset=custom", f"dataset.loader=contract_parts:{loader}", *overrides).dataset
    )


def _rows(parts) -> np.ndarray:
    """Each example's index as its every array says it (contract_parts: age = -dose = size = weight - 1)."""
    x, y, w = parts
    age = np.asarray(x["age"]).reshape(-1)
    np.testing.assert_array_equal(-np.asarray(x["dose"]).reshape(-1), age)
    np.testing.assert_array_equal(np.asarray(y["size"]).reshape(-1), age)
    np.testing.assert_array_equal(np.asarray(y["kind"]).reshape(-1), age % 3)
    np.testing.assert_array_equal(np.asarray(w).reshape(-1), 1 + age)
    return age


def _batches(source, split: str, batch: int = 4, seed: int | None = 1):
    return [tuple(_numpy(part) for part in element) for element in source.pipeline(split, batch, False, seed)]


def _numpy(tree):
    return {k: v.numpy() for k, v in tree.items()} if isinstance(tree, dict) else tree.numpy()


# ------------------------------------------------------------------------------------------------ structure


def test_a_whole_dict_loader_is_split_shuffled_and_limited_per_feature_head_and_weight():
    source = _load("whole", "dataset.validation_split=0.25", "dataset.test_split=0.25", "dataset.limit=12")
    assert (source.feature_names, source.head_names, source.weighted) == (("age", "dose"), ("kind", "size"), True)
    assert (source.num_train, source.num_val, source.num_test) == (12, 10, 10)
    assert source.input_shape == (1,) and source.kind == "tabular"
    seen = [_rows(source.split(name)) for name in source.splits]
    assert [len(s) for s in seen] == [12, 10, 10]
    together = np.concatenate(seen)
    assert len(set(together)) == 32 and not np.array_equal(together, np.sort(together))  # disjoint, shuffled
    again = _load("whole", "dataset.validation_split=0.25", "dataset.test_split=0.25", "dataset.limit=12")
    np.testing.assert_array_equal(_rows(again.train), seen[0])  # seeded


def test_a_tuple_of_features_stays_a_tuple_and_weights_ride_along():
    source = _load("tuple_features")
    x, y, w = source.train
    assert isinstance(x, tuple) and len(x) == 2 and source.feature_names == () and source.weighted
    np.testing.assert_array_equal(x[1], -x[0])
    np.testing.assert_array_equal(w, 1 + x[0].reshape(-1))
    np.testing.assert_array_equal(y, x[0].reshape(-1) % 3)
    first = source.first_inputs(3)
    assert isinstance(first, tuple) and [a.shape for a in first] == [(3, 1), (3, 1)]


@pytest.mark.parametrize("loader", ["per_split", "per_split_tf", "whole_tf"])
def test_every_loader_form_batches_named_features_heads_and_weights_together(loader):
    source = fit_to_task(_load(loader), "classification", heads=HEADS)
    assert (source.feature_names, source.head_names, source.weighted) == (("age", "dose"), ("kind", "size"), True)
    assert source.num_train + source.num_val == 40
    assert source.head_tasks == HEADS and source.head_outputs == {"kind": 3, "size": 1}
    batches = _batches(source, "train")
    x, y, w = batches[0]
    assert set(x) == {"age", "dose"} and set(y) == {"kind", "size"}
    assert y["kind"].dtype == np.int32 and y["size"].dtype == np.float32 and w.dtype == np.float32
    seen = np.concatenate([_rows(b) for b in batches])
    # Every training example once, its arrays together (a pipeline that dropped or repeated one fails here).
    assert len(seen) == len(set(seen)) == source.num_train
    assert sorted(seen) == sorted(_rows_of(source, "train"))
    first = source.first_inputs(2)
    assert set(first) == {"age", "dose"} and first["age"].shape == (2, 1)


def _rows_of(source, split):
    return np.concatenate([_rows(b) for b in _batches(source, split, seed=None)])


def test_workers_shards_keep_each_examples_arrays_together():
    source = fit_to_task(_load("whole"), "classification", heads=HEADS)
    ds = source.pipeline("train", 4, True, 7)
    shards = [[tuple(_numpy(p) for p in e) for e in ds.shard(2, i)] for i in range(2)]
    rows = [np.concatenate([_rows(b) for b in shard]) for shard in shards]
    assert not set(rows[0]) & set(rows[1]) and len(rows[0]) == len(rows[1]) > 0


def test_heads_without_task_heads_take_the_one_task_and_task_heads_names_each():
    source = fit_to_task(_load("whole"), "regression")
    assert source.head_tasks == {"kind": "regression", "size": "regression"}
    heads = {"kind": "classification", "size": "regression"}  # output name -> task name, as the review passes them
    assert fit_to_task(_load("whole"), "regression", heads=heads).head_tasks == HEADS


@pytest.mark.parametrize("form", ["arrays", "tf"])
def test_sample_weights_in_the_training_split_alone_are_taken_and_validation_is_unweighted(form):
    """Issue 63, item 11: refused as "sample weights in every split or in none" where Keras's fit(x, y,
    sample_weight=w, validation_data=(x_val, y_val)) takes them."""
    source = fit_to_task(_load("unweighted_val", f"+dataset.params.form={form}"), "classification", heads=HEADS)
    assert source.weighted and (source.num_train, source.num_val) == (30, 10)
    train, val = _batches(source, "train")[0], _batches(source, "val")[0]
    assert len(train) == 3 and len(val) == 2  # the eval step gets no weights: every example counts alike
    np.testing.assert_array_equal(train[2], 1 + train[0]["age"].reshape(-1))


def test_windows_of_a_fixed_shape_tf_data_does_not_know_are_read_checked_and_given_it():
    """Issue 63, item 8: keras.utils.timeseries_dataset_from_array(..., batch_size=None) yields windows of static
    shape (None, 2); they were refused as "batched, or ragged?" with a fix (drop .batch(), pad) that did not apply."""
    source = _load("windows")
    assert source.input_shape == (8, 2) and source.kind == "tabular"
    assert source.train.element_spec[0].shape == (8, 2) and source.val.element_spec[0].shape == (8, 2)
    x, y = next(iter(source.pipeline("train", 4, False, None)))
    assert x.shape == (4, 8, 2) and y.shape == (4,)


@pytest.mark.parametrize(
    ("form", "match", "fix"),
    [
        (
            "batched",
            r"train's feature 'x' is \(None, None, 2\): \(16, 8, 2\) in element 0, \(14, 8, 2\) in element "
            r"4, the last: batched\?",
            "ds.unbatch()",
        ),
        (
            "even",
            r"unbatched examples \(train's feature 'x' \(10, None, 2\), target 'y' \(10,\): every element holds "
            r"10 of each, a batch\?\)",
            "tf.ensure_shape(x, (10, 8, 2))",
        ),
        (
            "ragged",
            r"train's feature 'x' is \(None, 2\): \(4, 2\) in example 0, \(5, 2\) in example 1: ragged\?",
            "x = x[:n, :]; x = tf.pad(x, [[0, n - tf.shape(x)[0]], [0, 0]])",
        ),
    ],
)
def test_examples_of_different_shapes_are_refused_with_the_fix_for_what_they_are(form, match, fix):
    with pytest.raises(ConfigError, match=match) as err:
        _load("windows", f"+dataset.params.form={form}")
    assert fix in err.value.violations[0].fix


# ------------------------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("loader", "match"),
    [
        ("missing_in_val", r"the features of train in val too .*val lacks 'dose'"),
        ("missing_in_val_tf", r"the features of train in val too .*val lacks 'dose'"),
        ("heads_differ", r"heads \(y's keys\) of train in val too .*lacks 'size', has 'weight' besides"),
        ("nan_feature", r"finite values in feature 'dose' \(found NaN or inf in 2 example\(s\), e.g. index 3, 7\)"),
        ("short_feature", r"every feature and head \(lengths: age 40, dose 39, kind 40, size 40\)"),
        ("short_head", r"every feature and head \(lengths: age 40, dose 40, kind 40, size 38\)"),
        ("ragged_feature_tf", r"train's feature 'dose' is \(None,\)"),
        ("repeated_tf", r"finite datasets \(an epoch must end\)"),  # refused before the NaN check reads it
    ],
)
def test_a_broken_loader_is_refused_naming_the_feature_or_head(loader, match):
    with pytest.raises(ConfigError, match=match) as err:
        _load(loader)
    assert err.value.violations[0].key == "dataset.loader"


@pytest.mark.parametrize(
    ("form", "feature"),
    [
        ("plain", "x"),
        ("plain_per_split", "x"),
        ("tuple", "x[1]"),
        ("named", "dose"),
        ("tf_whole", "x"),
        ("tf_per_split", "x"),
        ("tf_named_per_split", "dose"),
    ],
)
def test_nan_features_are_refused_in_every_loader_form_naming_the_feature_and_rows(form, feature):
    """Issue 62, item 1: a plain (x, y) loader with two NaN cells trained to a NaN model and ended FINISHED."""
    with pytest.raises(ConfigError) as err:
        _load("nan_rows", f"+dataset.params.form={form}")
    (violation,) = err.value.violations
    assert violation.key == "dataset.loader"
    assert f"finite values in feature {feature!r} (found NaN or inf in 2 example(s), e.g. index 3, 7)" in (
        violation.expected
    )


@pytest.mark.parametrize(
    ("kind", "match"),
    [
        ("short", r"one sample weight per example, shape \(40,\) \(got shape \(39,\)\)"),
        ("negative", r"finite sample weights >= 0 \(found negative weights in 4 example\(s\)"),
        ("not_a_number", r"finite sample weights >= 0 \(found NaN or inf in 1 example\(s\), e.g. index 4\)"),
    ],
)
def test_bad_sample_weights_are_refused(kind, match):
    with pytest.raises(ConfigError, match=match):
        _load("bad_weights", f"+dataset.params.kind={kind}")


def test_negative_weights_streamed_are_refused_when_the_labels_are_checked():
    with pytest.raises(ConfigError, match=r"sample_weight.*found negative weights in"):
        fit_to_task(_load("negative_weights_tf"), "classification", heads=HEADS)


def test_a_heads_labels_are_checked_against_its_own_task_naming_it():
    with pytest.raises(ConfigError, match=r"task.heads.kind.name='classification'.*head 'kind': class ids >= 0"):
        fit_to_task(_load("bad_class_ids"), "classification", heads=HEADS)
    with pytest.raises(ConfigError, match=r"task.name='classification'.*head 'size': integer class ids"):
        fit_to_task(_load("whole"), "classification")  # no task.heads: every head is the one task's


def test_a_head_with_no_task_is_refused_naming_it():
    with pytest.raises(ConfigError, match=r"task.heads='size'.*task.heads names 'kind'; y also has 'size'"):
        fit_to_task(_load("whole"), "classification", heads={"kind": "classification"})


def test_every_problem_is_named_at_once():
    with pytest.raises(ConfigError) as err:
        _load("several_problems")
    found = [v.expected for v in err.value.violations]
    assert len(found) == 3, found
    for named in (
        "train split: finite values in feature 'dose'",
        "val lacks 'dose'",
        "val split: finite sample weights",
    ):
        assert any(named in f for f in found), (named, found)


def test_a_refused_loader_writes_nothing_and_mlflow_never_hears(tmp_path):
    from launcher.launch.training import execute

    store = tmp_path / "mlflow.db"
    cfg = compose(
        *TINY, "dataset=custom", "dataset.loader=contract_parts:missing_in_val", f"tracking.uri=sqlite:///{store}"
    )
    with pytest.raises(ConfigError, match="lacks 'dose'"):
        execute(cfg, tmp_path / "run", tmp_path)
    assert runs_in(store) == [] and not (tmp_path / "run" / "plan.yaml").exists()


# ------------------------------------------------------------------------------------------------ tfrecord


def test_tfrecord_streams_named_inputs_heads_and_weights_from_the_converter(tmp_path):
    from contract_parts import whole
    from launcher_datasets.to_tfrecord import main

    x, y, w = whole()
    np.savez(tmp_path / "data.npz", **x, **y, w=w)
    argv = [str(tmp_path / "data.npz"), str(tmp_path / "out"), "--shards", "2"]
    assert main([*argv, "--inputs", "age", "dose", "--targets", "kind", "size", "--weight", "w"]) == 0
    cfg = config("dataset=tfrecord", f"dataset.train={tmp_path}/out/train-*").dataset
    source = fit_to_task(DATASETS.get("tfrecord").load(cfg), "classification", heads=HEADS)
    assert (source.feature_names, source.head_names, source.weighted) == (("age", "dose"), ("kind", "size"), True)
    assert (source.num_train, source.num_val, source.train_shards) == (32, 8, (16, 16))
    assert source.head_outputs == {"kind": 3, "size": 1}
    seen = np.concatenate([_rows_of(source, "train"), _rows_of(source, "val")])
    assert sorted(seen) == list(range(40))


def test_tfrecord_roles_are_checked_naming_the_feature(tmp_path):
    from launcher_datasets.to_tfrecord import convert

    np.savez(tmp_path / "data.npz", x=np.zeros((10, 2), "float32"), y=np.arange(10) % 2)
    convert(tmp_path / "data.npz", tmp_path / "out", shards=1)
    features = "{x: {shape: [2], dtype: float32, role: input}, y: {shape: [], dtype: int64, role: label}}"
    cfg = config("dataset=tfrecord", f"dataset.train={tmp_path}/out/train-*", f"+dataset.features={features}").dataset
    with pytest.raises(ConfigError, match=r"dataset.features.y.role='label'.*input.*target.*weight") as err:
        DATASETS.get("tfrecord").load(cfg)
    assert "at least one feature with role: target" in str(err.value)


# ------------------------------------------------------------------------------------------------ a launch


@pytest.mark.slow  # a short training in this process
def test_a_one_head_model_of_named_inputs_trains_on_weighted_examples(tmp_path):
    import math

    from launcher.launch.training import execute

    cfg = compose(
        *[o for o in TINY if not o.startswith("model.")],
        "model=custom",
        "model.builder=contract_parts:two_inputs_one_head",
        "dataset=custom",
        "dataset.loader=contract_parts:one_head",
        "precision=mixed",
        "strategy=mirrored",
        "xla=true",
        "tracking.enabled=false",
        "checkpoint.enabled=false",
        "checkpoint.export_model=false",
    )
    outcome = execute(cfg, tmp_path / "run", tmp_path)
    assert outcome.error is None
    logs = outcome.result.epochs[-1].logs
    assert all(math.isfinite(logs[name]) for name in ("loss", "val_loss", "accuracy", "val_accuracy")), logs


@pytest.mark.slow  # a short training and a SavedModel export in this process
def test_forecasting_windows_train_and_serve_under_mirrored(tmp_path):
    """Issue 63, item 8: timeseries_dataset_from_array's windows, as keras.io makes them, through a user's LSTM under
    mirrored: the builder reads the windows' shape from spec.input_shape, the SavedModel takes windows."""
    import tensorflow as tf

    from launcher.launch.training import execute

    cfg = compose(
        "model=custom",
        "model.builder=contract_parts:window_model",
        "dataset=custom",
        "dataset.loader=contract_parts:windows",
        "task=regression",
        "train.epochs=1",
        "scaling.batch_size=16",
        "strategy=mirrored",
        "precision=fp32",
        "export.formats=[keras,saved_model]",
        "tracking.enabled=false",
        "checkpoint.enabled=false",
    )
    outcome = execute(cfg, tmp_path / "run", tmp_path)
    assert outcome.error is None and outcome.result.epochs
    served = tf.saved_model.load(str(tmp_path / "run" / "saved_model")).signatures["serving_default"]
    (spec,) = served.structured_input_signature[1].values()
    assert tuple(spec.shape) == (None, 8, 2)
    window = next(iter(_load("windows").val.batch(3)))[0]
    np.testing.assert_allclose(
        served(**{spec.name: window})["values"].numpy().reshape(-1),
        outcome.model.predict(window, verbose=0).reshape(-1),
        rtol=1e-5,
        atol=1e-6,
    )


def test_weights_beside_one_feature_array_change_nothing_else():
    plain, weighted = _load("token_ids", "+dataset.params.weighted=false"), _load("token_ids")
    assert weighted.weighted and not plain.weighted
    assert (weighted.kind, weighted.vocab_size) == (plain.kind, plain.vocab_size) == ("tokens", 50)
    assert weighted.train[0].dtype == plain.train[0].dtype


@pytest.mark.parametrize(
    ("form", "strings"),
    [
        ("plain", ("inputs",)),
        ("plain_per_split", ("inputs",)),
        ("named", ("color",)),
        ("frame", ("color",)),
        ("tf_whole", ("inputs",)),
        ("tf_named_per_split", ("color",)),
    ],
)
def test_strings_are_features_in_every_loader_form(form, strings):
    """Issue 63, item 1: a loader's NumPy array of strings was refused (`numeric inputs (got x of dtype object)`).
    Strings stay strings through the split and the pipeline; the resolver is told which inputs they are, and a
    builder of one string array is told `spec.input_dtype == "string"`."""
    from launcher.train.model_io import ModelSpec

    source = fit_to_task(_load("strings", f"+dataset.params.form={form}"), "classification")
    assert source.string_inputs() == strings and source.num_train + source.num_val == 40
    x, y = _batches(source, "train", seed=None)[0]
    text = x["color"] if isinstance(x, dict) else x
    assert text.dtype == object and all(isinstance(v, bytes) for v in text.reshape(-1))
    if isinstance(x, dict):
        np.testing.assert_array_equal(x["size"] % 4 == 0, text == b"red")  # each example's features stay together
        assert x["size"].dtype == np.float32
    else:
        np.testing.assert_array_equal([b"red" in v for v in text], y == 1)
    spec = ModelSpec.of(source)
    assert spec.input_dtype == ("string" if strings == ("inputs",) else "float32")


def test_a_missing_string_is_refused_naming_the_feature_and_example():
    with pytest.raises(ConfigError) as err:
        _load("strings", "+dataset.params.form=missing")
    (violation,) = err.value.violations
    assert "feature 'color' of numbers or of strings (got dtype object holding None at index 5)" in violation.expected
    assert "df['color'].fillna('')" in violation.fix
