"""A test split, used once: held out from training and validation, evaluated after training on the best model,
never a monitor, and the same split (and numbers) under `mode=eval eval.split=test`."""

from __future__ import annotations

import numpy as np
import pytest
from support.config import TINY, compose, config
from support.tracking import runs_in

from launcher.config.errors import ConfigError
from launcher.config.schema import to_config
from launcher.config.tasks import known_epoch_metrics, monitor_problems
from launcher.train.data import split_arrays


def _arrays(n: int = 100):
    x = np.arange(n, dtype="float32").reshape(n, 1)
    return x, np.arange(n) % 3


def test_a_test_split_is_disjoint_and_leaves_the_other_splits_as_they_were_without_it():
    x, y = _arrays()
    without = split_arrays(x, y, 0.2, seed=3, kind="tabular")
    with_test = split_arrays(x, y, 0.2, seed=3, kind="tabular", test_split=0.1)
    assert without.test is None and without.num_test == 0
    assert (with_test.num_train, with_test.num_val, with_test.num_test) == (70, 20, 10)
    np.testing.assert_array_equal(with_test.val[0], without.val[0])  # validation unchanged by the test split
    seen = [set(with_test.split(name)[0].ravel().tolist()) for name in ("train", "val", "test")]
    assert sum(len(s) for s in seen) == 100 and len(set().union(*seen)) == 100
    assert set(with_test.train[0].ravel()) < set(without.train[0].ravel())  # taken from what was training data


def test_a_test_split_that_leaves_no_training_examples_is_refused_naming_it():
    x, y = _arrays(10)
    with pytest.raises(ConfigError, match=r"dataset.test_split=0.9.*the training split is empty"):
        split_arrays(x, y, 0.1, seed=0, kind="tabular", test_split=0.9)


@pytest.mark.parametrize(
    "overrides",
    [
        ["checkpoint.monitor=test_accuracy"],
        ["objective=test_loss"],
        ["train.early_stopping.enabled=true", "train.early_stopping.monitor=test_loss"],
        ["train.reduce_lr_on_plateau.enabled=true", "train.reduce_lr_on_plateau.monitor=test_accuracy"],
    ],
    ids=["checkpoint", "objective", "early-stopping", "plateau"],
)
def test_no_test_metric_steers_training(overrides):
    cfg = to_config(compose(*overrides, "dataset.test_split=0.1", "train.test_at_end=true"))
    problems = monitor_problems(cfg, "classification", known_epoch_metrics("classification", ["accuracy"]))
    assert len(problems) == 1
    assert "never steer it" in problems[0].expected
    assert problems[0].fix.split(" ")[0].endswith(("=val_accuracy", "=val_loss"))


def test_test_at_end_without_a_test_split_is_refused_with_how_each_dataset_gets_one(cli_here, tmp_path):
    done = cli_here(*TINY, "train.test_at_end=true", "checkpoint.monitor=test_accuracy")
    assert done.returncode == 2
    # The rule's refusal comes first (before TensorFlow loads); the data's once it passes.
    assert "checkpoint.monitor='test_accuracy'" in done.stderr and "never steer it" in done.stderr
    done = cli_here(*TINY, "train.test_at_end=true", "checkpoint.monitor=val_accuracy")
    assert done.returncode == 2
    assert "train.test_at_end=True: expected a test split (dataset=digits has none)" in done.stderr
    assert "dataset.test_split=0.1 (array datasets), dataset.test=<glob> (tfrecord)" in done.stderr
    assert not runs_in(tmp_path / "mlflow.db")


@pytest.mark.slow  # two replicas: a multi-device run
def test_test_metrics_are_the_best_models_and_match_mode_eval_under_mixed_mirrored_xla(cli_here, tmp_path):
    # mode=max on val_loss keeps the *worst* epoch as "best": epoch 1 (the loss falls from the first epoch), so
    # the tested weights differ from the final ones and a test of the final model would not match.
    common = ["dataset.test_split=0.1", "precision=mixed", "strategy=mirrored", "xla=true"]
    done = cli_here(
        *TINY,
        *common,
        "train.test_at_end=true",
        "checkpoint.monitor=val_loss",
        "checkpoint.mode=max",
        "name=tested",
        "hydra.run.dir=outputs/runs/tested",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "180 test examples, evaluated once after training on the best model" in done.stdout
    [run] = runs_in(tmp_path / "mlflow.db")  # the training run (the evaluations below are its children)
    tested = {k: v for k, v in run.data.metrics.items() if k.startswith("test_")}
    assert set(tested) == {"test_loss", "test_accuracy"}
    assert run.data.tags["test.model"].startswith("best (ckpt-") and "epoch 1)" in run.data.tags["test.model"]

    evaluated = {}
    for model in ("best", "final"):
        ran = cli_here(
            "mode=eval", "eval.run=tested", f"eval.model={model}", "eval.split=test", f"hydra.run.dir={model}"
        )
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert "on the test split of digits (180 examples)" in ran.stdout
        file = {"best": "best.keras", "final": "model.keras"}[model]
        [child] = [r for r in runs_in(tmp_path / "mlflow.db") if r.data.params.get("eval.model", "").endswith(file)]
        evaluated[model] = child.data.metrics
    for key, value in tested.items():
        assert evaluated["best"][key] == pytest.approx(value, rel=1e-3), key
    assert evaluated["final"]["test_loss"] != pytest.approx(tested["test_loss"], rel=1e-3)

    # Another division of the same data would test on examples the model trained on: refused, naming the key.
    moved = cli_here("mode=eval", "eval.run=tested", "eval.split=test", "dataset.test_split=0.2", "hydra.run.dir=m")
    assert moved.returncode == 2
    assert "dataset.test_split=0.2: expected the training run's value (0.1)" in moved.stderr


# ------------------------------------------------------------------ how each streamed dataset brings its test data


def test_tfrecord_test_shards_are_found_beside_the_training_shards_and_hold_the_held_out_examples(tmp_path):
    from launcher_datasets.to_tfrecord import convert

    from launcher.train.registry import DATASETS

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(50, 3)).astype("float32"), rng.integers(0, 4, size=50)
    np.savez(tmp_path / "data.npz", x=x, y=y)
    meta = convert(tmp_path / "data.npz", tmp_path / "out", shards=2, validation_split=0.2, test_split=0.1)
    assert sum(meta["splits"]["test"]["counts"]) == 5
    source = DATASETS.get("tfrecord").load(config("dataset=tfrecord", f"dataset.train={tmp_path}/out/train-*").dataset)
    assert (source.num_train, source.num_val, source.num_test) == (35, 10, 5)
    read = [split for name in source.splits for split in source._dataset(name).as_numpy_iterator()]
    assert sorted(float(xi.sum()) for xi, _ in read) == sorted(float(xi.sum()) for xi in x)  # each once

    with pytest.raises(ConfigError, match=r"dataset.test='/nowhere/test-\*'.*no file matches"):
        DATASETS.get("tfrecord").load(
            config("dataset=tfrecord", f"dataset.train={tmp_path}/out/train-*", "dataset.test=/nowhere/test-*").dataset
        )
    with pytest.raises(
        ConfigError,
        match=r"(?s)dataset.test_split=0.1: expected 0 for dataset=tfrecord.*fix: dataset.test_split=0 dataset.test=",
    ):
        DATASETS.get("tfrecord").load(
            config("dataset=tfrecord", f"dataset.train={tmp_path}/out/train-*", "dataset.test_split=0.1").dataset
        )


def test_image_folder_reads_its_test_split_from_test_path_with_the_same_classes(tmp_path):
    from PIL import Image

    from launcher.train.registry import DATASETS

    rng = np.random.default_rng(0)
    for root, count in (("train", 6), ("test", 2)):
        for label in ("cats", "dogs"):
            (tmp_path / root / label).mkdir(parents=True)
            for i in range(count):
                Image.fromarray(rng.integers(0, 255, size=(9, 9, 3), dtype=np.uint8)).save(
                    tmp_path / root / label / f"{i}.png"
                )
    args = ["dataset=image_folder", f"dataset.path={tmp_path}/train", "dataset.image_size=[8,8]"]
    source = DATASETS.get("image_folder").load(config(*args, f"dataset.test_path={tmp_path}/test").dataset)
    assert (source.num_train + source.num_val, source.num_test) == (12, 4)
    x, y = next(iter(source.pipeline("test", 4, False, None)))
    assert x.shape == (4, 8, 8, 3) and float(np.max(x)) <= 1.0 and sorted(y.numpy().tolist()) == [0, 0, 1, 1]

    (tmp_path / "test" / "owls").mkdir()
    with pytest.raises(
        ConfigError, match=r"dataset.test_path=.*the training classes as sub-folders \['cats', 'dogs'\]"
    ):
        DATASETS.get("image_folder").load(config(*args, f"dataset.test_path={tmp_path}/test").dataset)


def test_a_custom_loaders_test_entry_is_its_test_split(tmp_path, monkeypatch):
    from launcher.launch.review import load_data

    module = tmp_path / "split_loader.py"
    module.write_text(
        "import numpy as np\n"
        "def load():\n"
        "    x = np.random.default_rng(0).normal(size=(30, 4)).astype('float32')\n"
        "    y = np.arange(30) % 3\n"
        "    return {'train': (x[:20], y[:20]), 'val': (x[20:25], y[20:25]), 'test': (x[25:], y[25:])}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    source = load_data(to_config(compose("dataset=custom", "dataset.loader=split_loader:load")))
    assert (source.num_train, source.num_val, source.num_test) == (20, 5, 5)
    assert source.test[1].dtype == np.int32  # labels cast for the task, as the other splits' are
