"""A person's own project: components by import path, installed plugins, eval and predict, and refusals.

The example project (examples/my_project) is copied to a temporary folder and trained with the one command
its README gives, by the real CLI; nothing is installed into the launcher.

The user's model and data by import path (`launcher.train.user_model`, `launcher.train.user_data`); eval and predict
find the trained run by name (`launcher.launch.find_run`).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import warm
import yaml
from support.config import ROOT
from support.tracking import runs_in, store

from launcher.config.errors import ConfigError
from launcher.config.imports import check_call, import_component

EXAMPLE = ROOT / "examples" / "my_project"


# ------------------------------------------------------------- import paths (in-process)


def test_an_import_path_names_the_object_or_the_problem():
    assert import_component("model.builder", "json:dumps", "a function") is __import__("json").dumps
    cases = {
        "json": "module.path:attribute",
        "no_such_module_xyz:build": "no module named 'no_such_module_xyz'",
        "json:no_such": "has no attribute 'no_such'",
    }
    for path, said in cases.items():
        with pytest.raises(ConfigError) as err:
            import_component("model.builder", path, "a function")
        assert err.value.violations[0].key == "model.builder" and said in str(err.value), path


def test_a_signature_that_cannot_take_the_arguments_is_refused_before_the_call():
    def build(spec, units=8):
        raise AssertionError("never called")

    check_call("model.builder", "p:build", build, ("spec",), {"units": 4}, "build(spec, **params)")
    with pytest.raises(ConfigError, match=r"yours is build\(spec, units=8\)"):
        check_call("model.builder", "p:build", build, ("spec",), {"width": 4}, "build(spec, **params)")


# ------------------------------------------------------------- the example project (CLI)


def run_cli(args: list[str], cwd: Path, env: dict | None = None, timeout: int = 400):
    return warm.run(
        [sys.executable, "-m", "launcher", *args], cwd=cwd, timeout=timeout, env={**os.environ, **(env or {})}
    )


def readme_command() -> list[str]:
    """The training command the example's README gives (so the README stays true)."""
    text = (EXAMPLE / "README.md").read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("python -m launcher --config-dir conf experiment=")]
    return line.split()[3:]


@pytest.fixture
def project(tmp_path):
    copy = tmp_path / "my_project"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("outputs", "__pycache__"))
    return copy


@pytest.mark.slow
def test_example_project_trains_from_its_readme_then_evaluates_and_predicts(project, launcher_here):
    """The README's training command in a process of its own, as a person runs it; evaluation, prediction and
    loading the export through the same entry in this process."""
    args = readme_command()
    assert {"precision=mixed", "strategy=mirrored", "xla=true"} <= set(args)
    done = run_cli(args, project)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    run_dir = project / "outputs" / "runs" / "baseline"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{project}/outputs/mlflow.db")
    experiment = client.get_experiment_by_name("my_project")
    training = [r for r in client.search_runs([experiment.experiment_id]) if "launcher.mode" not in r.data.tags]
    (run,) = training
    tags, params = run.data.tags, run.data.params
    assert run.info.status == "FINISHED"
    assert (tags["plan.step"], tags["plan.precision"], tags["plan.replicas"]) == ("replica_xla", "mixed", "2")
    assert params["task.loss"] == "my_project.losses:focal_loss"
    # The user's last Dense computes in float16 under the mixed policy: wrapped, and the Plan says so.
    assert tags["plan.model.output_dtype"] == "float32 (wrapped)"
    history = client.get_metric_history(run.info.run_id, "val_balanced_accuracy")
    assert len(history) == 8 and "balanced_accuracy" in run.data.metrics
    assert run.data.metrics["val_accuracy"] > 0.85

    # Exported, logged and loadable where my_project imports (its custom layer registers itself).
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "model")}
    assert {"model/model.keras", "model/best.keras"} <= artifacts
    accuracy = exported_accuracy(project)
    assert accuracy == pytest.approx(run.data.metrics["val_accuracy"], abs=0.015)  # at most 2 of 143 flip

    # The custom metric as checkpoint.monitor kept the best epoch: evaluating best.keras (under the training
    # run's mirrored + XLA config) gives the best val_balanced_accuracy of the history.
    done = launcher_here(["--config-dir", "conf", "mode=eval", "eval.run=baseline", "eval.model=best"], project)
    assert done.returncode == 0, done.stderr[-3000:]
    (evaluation,) = [
        r for r in client.search_runs([experiment.experiment_id]) if r.data.tags.get("launcher.mode") == "eval"
    ]
    assert evaluation.data.tags["mlflow.parentRunId"] == run.info.run_id
    assert evaluation.data.tags["plan.step"] == "replica_xla"
    best = max(m.value for m in history)
    assert evaluation.data.metrics["val_balanced_accuracy"] == pytest.approx(best, abs=1e-4)
    assert client.get_run(run.info.run_id).data.tags["eval.latest_run_id"] == evaluation.info.run_id

    # Without --config-dir: prediction reads the run dir's own config (issue 62, item 8: a run trained with the
    # person's own config group options failed in Hydra, MissingConfigException, however the search path was given).
    done = launcher_here(
        [
            "mode=predict",
            "eval.run=baseline",
            "eval.output=predictions.npz",
            "name=predict-baseline",
        ],
        project,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # eval.output given is a path from where the command ran; the predict's own dir is inside the run it read.
    saved = np.load(project / "predictions.npz")
    assert (run_dir / "predict" / "predict-baseline" / "console.log").is_file()
    assert not (project / "outputs" / "runs" / "predict-baseline").exists()
    # The served answer (probabilities, label) beside the split's label (target), numbered by row.
    assert sorted(saved) == ["label", "probabilities", "row", "target"]
    assert saved["probabilities"].shape == (143, 2) and saved["row"].tolist() == list(range(143))
    assert np.mean(saved["label"] == saved["target"]) == pytest.approx(run.data.metrics["val_accuracy"], abs=0.015)
    (prediction,) = [
        r for r in client.search_runs([experiment.experiment_id]) if r.data.tags.get("launcher.mode") == "predict"
    ]
    assert {a.path for a in client.list_artifacts(prediction.info.run_id, "predictions")} == {
        "predictions/predictions.npz"
    }
    assert run_dir.is_dir()


def exported_accuracy(project: Path) -> float:
    """model.keras loaded where my_project imports (its custom layer registers itself), on the val split."""
    import importlib

    import keras

    sys.path.insert(0, str(project))
    try:
        data = importlib.import_module("my_project.data")
        importlib.import_module("my_project.models")
        x, y = data.load()["val"]
        predicted = keras.saving.load_model(project / "outputs" / "runs" / "baseline" / "model.keras").predict(
            x, verbose=0
        )
        return float((predicted.argmax(-1) == y).mean())
    finally:
        sys.path.remove(str(project))
        for name in [n for n in sys.modules if n == "my_project" or n.startswith("my_project.")]:
            del sys.modules[name]


BROKEN = """
import numpy as np
import keras


def not_a_model(spec, **params):
    return {"layers": 3}


def float_labels(**params):
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    return x, x[:, 0] * 0.5


def big_labels(**params):
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    return x, np.arange(64) % 5
"""
REFUSALS = {
    # case: (overrides, the key named, words of the message)
    "missing module": (
        ["model.builder=no_such_package.models:build"],
        "model.builder",
        "no module named 'no_such_package'",
    ),
    "missing attribute": (
        ["model.builder=my_project.models:no_such_builder"],
        "model.builder",
        "has no attribute 'no_such_builder'",
    ),
    "not a model": (
        ["model.builder=my_project.broken:not_a_model"],
        "model.builder",
        "returns a keras.Model (it returned dict)",
    ),
    "float labels": (["dataset.loader=my_project.broken:float_labels"], "task.name", "integer class ids"),
    "labels beyond the classes": (
        ["dataset.loader=my_project.broken:big_labels", "dataset.num_classes=3"],
        "dataset.num_classes",
        "more classes than the largest label (4",
    ),
    "unknown metric": (
        ["task.metrics=[accuracy,my_project.metrics:BalancedAccuracy,no_such_metric]"],
        "task.metrics",
        "a metric name the launcher or keras.metrics knows",
    ),
}


def slug(case: str) -> str:
    return re.sub(r"\W+", "-", case)


@pytest.mark.slow
def test_bad_plugin_inputs_are_refused_with_exit_2_and_no_traceback(project, launcher_here):
    """Each case through the CLI's entry (in this process; `test_cli` runs exit 2 in a process of its own): exit 2,
    the key and the fix, no traceback, no MLflow run."""
    (project / "my_project" / "broken.py").write_text(BROKEN)
    base = ["--config-dir", "conf", "experiment=baseline", "train.epochs=1"]
    for case, (overrides, key, said) in REFUSALS.items():
        name = slug(case)
        db = project / "outputs" / f"{name}.db"  # an empty store made ready (MLflow's migrations once per process)
        done = launcher_here([*base, *overrides, f"name={name}", f"tracking.uri={store(db)}"], project)
        err = done.stderr
        assert done.returncode == 2, (case, err[-2000:])
        assert "Traceback" not in err and "Invalid configuration" in err, case
        assert f"- {key}=" in err and said in err and "fix:" in err, (case, err[-1500:])
    for case in REFUSALS:  # no run was ever created, in any experiment of its store
        assert not runs_in(project / "outputs" / f"{slug(case)}.db"), case


# ------------------------------------------------------------- installed plugins


ENTRY_POINTS = """[launcher.models]
acme_net = acme_plugin.models:build

[launcher.datasets]
acme_data = acme_plugin.data:load

[launcher.losses]
acme_xent = acme_plugin.parts:CrossEntropy

[launcher.metrics]
acme_confidence = acme_plugin.parts:Confidence

[launcher.callbacks]
acme_printer = acme_plugin.parts:Printer

[launcher.exports]
acme_npz = acme_plugin.parts:WeightsNpz

[launcher.configs]
acme = acme_plugin.conf
"""
PLUGIN_MODELS = """
import keras


def build(spec, units=4):
    inputs = keras.Input(spec.input_shape)
    x = keras.layers.Dense(units, activation="relu", name=f"hidden{units}")(inputs)
    return keras.Model(inputs, keras.layers.Dense(spec.outputs)(x))
"""
PLUGIN_DATA = """
import numpy as np


def load(n=300):
    x = np.random.default_rng(0).normal(size=(n, 6)).astype("float32")
    return x, (x[:, 0] + x[:, 1] > 0).astype("int64")
"""
PLUGIN_PARTS = """
import keras
from keras import ops


class CrossEntropy(keras.losses.SparseCategoricalCrossentropy):
    def __init__(self, **kwargs):
        super().__init__(from_logits=True, **kwargs)


class Confidence(keras.metrics.Metric):
    def __init__(self, name="confidence", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.total.assign_add(ops.sum(ops.max(y_pred, axis=-1)))
        self.count.assign_add(ops.cast(ops.shape(y_pred)[0], "float32"))

    def result(self):
        return self.total / ops.maximum(self.count, 1.0)


class Printer(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(f"acme printer: epoch {epoch} val_confidence {logs['val_confidence']:.3f}", flush=True)


class WeightsNpz:
    written = "weights.npz"

    def write(self, model, path):
        import numpy as np

        np.savez(path, **{w.path.replace("/", "."): np.asarray(w) for w in model.weights})
"""
PLUGIN_MODEL_YAML = """defaults:
  - /schema/model/custom@_here_

name: acme_net
builder: acme_plugin.models:build
params:
  units: 8
"""


def install_plugin(site: Path) -> None:
    """A distribution on sys.path as pip leaves one: the package and its dist-info with entry points."""
    package = site / "acme_plugin"
    (package / "conf" / "model").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "conf" / "__init__.py").write_text("")
    (package / "models.py").write_text(PLUGIN_MODELS)
    (package / "data.py").write_text(PLUGIN_DATA)
    (package / "parts.py").write_text(PLUGIN_PARTS)
    (package / "conf" / "model" / "acme_net.yaml").write_text(PLUGIN_MODEL_YAML)
    info = site / "acme_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)


@pytest.mark.slow
def test_an_installed_plugin_adds_model_and_dataset_choices_with_its_yaml_defaults(tmp_path):
    """A distribution on the path: its model and dataset are choices (with its YAML), its loss, metric and callback
    are taken by their short names."""
    install_plugin(tmp_path / "site")
    # the plugin's site first, then the path this test runs with (a worktree of the launcher stays the one tested)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))}
    listed = run_cli(["--help"], tmp_path, env)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "acme_net" in listed.stdout and "acme_data" in listed.stdout
    assert "task.loss (installed plugins): acme_xent" in listed.stdout
    assert "export.formats (installed plugins): acme_npz" in listed.stdout
    done = run_cli(
        [
            "model=acme_net",
            "dataset=acme_data",
            "task.loss=acme_xent",
            "task.metrics=[accuracy,acme_confidence]",
            "train.callbacks=[acme_printer]",
            "export.formats=[keras,acme_npz]",
            "train.epochs=1",
            "tracking.enabled=false",
            "checkpoint.enabled=false",
            "name=plugin",
        ],
        tmp_path,
        env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    config = (tmp_path / "outputs" / "runs" / "plugin" / "config.yaml").read_text()
    assert "builder: acme_plugin.models:build" in config and "units: 8" in config  # the plugin's YAML
    assert "loader: acme_plugin.data:load" in config
    assert "epoch 1/1" in done.stdout
    assert "acme printer: epoch 0 val_confidence 0." in done.stdout  # the plugin metric, logged; the callback, run
    decided = yaml.safe_load((tmp_path / "outputs" / "runs" / "plugin" / "plan.yaml").read_text())["decisions"]
    assert decided["task.loss"]["value"] == "acme_xent"
    assert "installed plugin's (acme_plugin.parts:CrossEntropy)" in decided["task.loss"]["reason"]
    # the plugin export format, written from the trained model beside model.keras
    assert "acme_npz: your export writer (acme_plugin.parts:WeightsNpz)" in decided["export.formats"]["reason"]
    weights = np.load(tmp_path / "outputs" / "runs" / "plugin" / "weights.npz")
    assert any(name.endswith("hidden8.kernel") and weights[name].shape == (6, 8) for name in weights.files)
    assert "export   acme_npz" in done.stdout


# ------------------------------------------------------------- a loss and metrics with arguments (CLI)


@pytest.mark.slow
def test_a_focal_loss_class_and_pr_auc_take_their_arguments_from_the_command_line(cli, tmp_path):
    """keras.io's imbalanced classification as its author writes it (a sigmoid output, a Loss class without
    `reduction`, class weights, PR-AUC and false negatives), its arguments given and swept on the command line: the
    run logs them as params, the metrics under their own names, and serves the model's own probabilities."""
    import tensorflow as tf

    shutil.copy(ROOT / "tests" / "binary_parts.py", tmp_path / "imbalanced.py")
    done = cli(
        "model=custom",
        "model.builder=imbalanced:build_sigmoid",
        "dataset=custom",
        "dataset.loader=imbalanced:load",
        "task.loss={name:'imbalanced:FocalLoss',gamma:2.0}",
        "task.loss.gamma=3",
        "task.metrics=[{name:auc,curve:PR},{name:false_negatives,thresholds:0.3},recall]",
        "task.class_weight={0: 1, 1: 4}",
        "export.formats=[keras,saved_model]",
        "precision=fp32",
        "train.epochs=2",
        "tracking.system_metrics=false",
        "tracking.log_model=false",  # the SavedModel is what serves here; the MLflow model is not read
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = runs_in(tmp_path / "mlflow.db")
    params, metrics = run.data.params, run.data.metrics
    assert (params["task.loss.name"], params["task.loss.gamma"]) == ("imbalanced:FocalLoss", "3")
    assert run.data.tags["plan.task.loss"] == "imbalanced:FocalLoss(gamma=3)"
    assert {"val_auc", "val_false_negatives", "val_recall"} <= set(metrics), sorted(metrics)
    assert not [name for name in metrics if name.endswith("_1")], sorted(metrics)

    import binary_parts
    import keras

    x = binary_parts.load()["val"][0]
    model = keras.saving.load_model(tmp_path / "run" / "model.keras", compile=False)
    served = tf.saved_model.load(str(tmp_path / "run" / "saved_model")).signatures["serving_default"]
    answer = served(inputs=tf.constant(x))
    np.testing.assert_allclose(answer["probabilities"].numpy(), model.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(answer["label"].numpy(), (model.predict(x, verbose=0)[:, 0] > 0.5).astype("int32"))
