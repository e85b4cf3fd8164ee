"""A person's project with named features, two heads and weighted examples, through the real CLI: its own package
(a loader of a numeric and a categorical feature, targets by head and sample weights; a two-input, two-head model)
and its own task file (`conf/task/tabular.yaml`: the heads, a loss weight, class weights) on `hydra.searchpath`.
One launch per strategy family; then what the launcher refuses about such a project, each with exit 2 and nothing
written. The pieces: `launcher.train.tasks` (heads), `launcher.train.user_data` (the contract), `launcher.plan`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.tracking import runs_in

DATA = '''
import numpy as np

COLOURS = 4


def _split(rng, n):
    num = rng.normal(size=(n, 3)).astype("float32")
    colour = rng.integers(0, COLOURS, n).astype("int32")
    score = num[:, 0] + 1.5 * (colour == 1)
    kind = np.digitize(score, [0.4, 1.8]).astype("int32")  # 3 classes, class 2 the rare one
    size = (num[:, 1] + 0.5 * colour).astype("float32")
    weight = rng.uniform(0.5, 1.5, n).astype("float32")
    return {"num": num, "colour": colour[:, None]}, {"kind": kind, "size": size}, weight


def load(n=64, broken=""):
    """{"train": (x, y, w), "val": (x, y, w)}: features num (3 floats) and colour (a category id); heads kind and size.
    `broken` breaks one part of the contract, as a person's loader might."""
    rng = np.random.default_rng(0)
    train, val = _split(rng, n), _split(rng, n // 2)
    if broken == "negative_weights":
        train[2][:3] = -1.0
    elif broken == "missing_in_val":
        del val[0]["colour"]
    return {"train": train, "val": val}
'''

MODEL = '''
import keras


def build(spec, units=8, kind="kind", num="num"):
    """Inputs num (3, named by `num`) and colour (an id, embedded); heads `kind` (3 logits, the output named by
    `kind`) and size."""
    numbers = keras.Input((3,), name=num)
    colour = keras.Input((1,), name="colour", dtype="int32")
    embedded = keras.layers.Flatten()(keras.layers.Embedding(4, 2)(colour))
    hidden = keras.layers.Dense(units, activation="relu")(keras.layers.Concatenate()([numbers, embedded]))
    outputs = {kind: keras.layers.Dense(3, name=kind)(hidden), "size": keras.layers.Dense(1, name="size")(hidden)}
    return keras.Model({num: numbers, "colour": colour}, outputs)
'''

TASK = """defaults:
  - /schema/task@_here_

heads:
  kind: {name: classification, metrics: [accuracy], class_weight: balanced}
  size: {name: regression, loss_weight: 0.5, metrics: [mae]}
"""

METRICS = ["val_loss", "val_kind_loss", "val_kind_accuracy", "val_size_loss", "val_size_mae"]
SMALL = [
    "train.epochs=1",
    "scaling.batch_size=16",
    "train.steps_per_execution=1",
    "tracking.system_metrics=false",
    "tracking.log_model=false",
]


def write_project(folder: Path) -> list[str]:
    """The project's package and conf in `folder`; the overrides that launch it from there."""
    package = folder / "tabular_project"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "data.py").write_text(DATA)
    (package / "models.py").write_text(MODEL)
    (folder / "conf" / "task").mkdir(parents=True)
    (folder / "conf" / "task" / "tabular.yaml").write_text(TASK)
    return [
        f"hydra.searchpath=[file://{folder / 'conf'}]",
        "task=tabular",
        "model=custom",
        "model.builder=tabular_project.models:build",
        "dataset=custom",
        "dataset.loader=tabular_project.data:load",
        *SMALL,
    ]


def check_trained(folder: Path, done, plan_file: Path) -> dict:
    """Exit 0, every head's validation metrics in the one MLflow run, the heads in plan.yaml; returns its tags."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    (run,) = runs_in(folder / "mlflow.db")
    assert run.info.status == "FINISHED"
    missing = [m for m in METRICS if m not in run.data.metrics]
    assert not missing, (missing, sorted(run.data.metrics))
    plan = yaml.safe_load(plan_file.read_text())
    check_heads_planned(plan)
    return run.data.tags


def check_heads_planned(plan: dict) -> None:
    """plan.yaml's decisions: each head with its task, loss weight and class weight; the kind head's weights from
    the training labels (class 2, the rare one, weighs most)."""
    decisions = plan_values(plan)
    heads = decisions["task.heads"]
    assert heads["kind"]["task"] == "classification" and heads["kind"]["class_weight"] == "balanced"
    assert heads["size"]["task"] == "regression" and heads["size"]["loss_weight"] == 0.5
    assert heads["kind"]["loss_weight"] == 1.0
    weights = decisions["task.class_weights"]["kind"]
    assert len(weights) == 3 and weights[2] > max(weights[0], weights[1]), weights


def plan_values(plan: dict) -> dict:
    """plan.yaml's decisions: key -> value (each decision is written with its value and its reason)."""
    return {key: decision["value"] for key, decision in plan["decisions"].items()}


@pytest.fixture
def project(tmp_path) -> list[str]:
    return write_project(tmp_path)


# ------------------------------------------------------------------------------------------------ every family


@pytest.mark.slow
def test_the_seed_cell_mixed_mirrored_xla_trains_every_head_in_a_process_of_its_own(project, cli, tmp_path):
    done = cli(*project, "precision=mixed", "strategy=mirrored", "xla=true", cwd=tmp_path, timeout=400)
    tags = check_trained(tmp_path, done, tmp_path / "run" / "plan.yaml")
    assert (tags["plan.step"], tags["plan.precision"], tags["plan.replicas"]) == ("replica_xla", "mixed", "2")


@pytest.mark.slow
def test_bf16_on_the_default_strategy_trains_every_head(project, cli_here, tmp_path):
    done = cli_here(*project, "precision=bf16", "strategy=default")
    tags = check_trained(tmp_path, done, tmp_path / "run" / "plan.yaml")
    assert tags["plan.precision"] == "bf16"


@pytest.mark.slow
def test_two_local_workers_train_every_head_in_the_chiefs_run(project, cli, tmp_path):
    done = cli(*project, "strategy=multi_worker", "strategy.local_workers=2", cwd=tmp_path, timeout=400)
    tags = check_trained(tmp_path, done, tmp_path / "run" / "plan.yaml")
    assert tags["plan.strategy"] == "multi_worker" and tags["multi_worker.weights_identical"] == "true"


@pytest.mark.slow
def test_a_restarted_attempt_finds_the_projects_own_task_file_and_finishes(project, cli, tmp_path):
    """train.max_restarts runs the training in a child: it is given the person's own conf (hydra.searchpath) too."""
    restarts = ["precision=fp32", "xla=false", "train.max_restarts=1", "train.restart_backoff=0"]
    done = cli(*project, *restarts, cwd=tmp_path, timeout=400, env={"LAUNCHER_FAULT": "RAISE@steps:2#1"})
    assert done.returncode == 0 and "Restart 1 of 1" in done.stderr, done.stderr[-3000:]
    assert "Could not find" not in done.stderr
    (run,) = runs_in(tmp_path / "mlflow.db")  # the injected failure's traceback is printed; the run goes on
    assert run.info.status == "FINISHED" and not [m for m in METRICS if m not in run.data.metrics]
    check_heads_planned(yaml.safe_load((tmp_path / "run" / "plan.yaml").read_text()))


@pytest.mark.slow
def test_explain_prints_the_heads_their_losses_loss_weights_and_class_weights(project, cli_here, tmp_path):
    done = cli_here(*project, "explain=true")
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [ln for ln in done.stdout.splitlines() if ln.strip().startswith("task.heads ")]
    for shown in ("kind", "classification", "crossentropy", "balanced", "size", "regression", "mse", "0.5"):
        assert shown in line, (shown, line)
    assert runs_in(tmp_path / "mlflow.db") == []


# ------------------------------------------------------------------------------------------------ refusals

REFUSALS = {
    # case: (overrides, the key named, words naming the head or feature)
    "y keys not the model's outputs": (
        ["+model.params.kind=kinds"],
        "task.heads",
        "outputs with no task config: ['kinds']; head configs with no such output: ['kind']; the loader's y keys",
    ),
    "a head with no task config": (["~task.heads.size"], "task.heads", "'size'"),
    "model inputs not the data's features": (
        ["+model.params.num=usage"],
        "model.builder",
        "its inputs are ['usage', 'colour']",
    ),
    "class_weight on a regression head": (
        ["+task.heads.size.class_weight=balanced"],
        "task.heads.size.class_weight",
        "regression",
    ),
    "negative sample weights": (["+dataset.params.broken=negative_weights"], "dataset.loader", "negative weights"),
    "a feature of train missing in val": (["+dataset.params.broken=missing_in_val"], "dataset.loader", "'colour'"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_broken_project_is_refused_with_exit_2_naming_the_head_or_feature_and_nothing_written(
    case, project, cli_here, tmp_path
):
    overrides, key, named = REFUSALS[case]
    done = cli_here(*project, *overrides)
    err = done.stderr
    assert done.returncode == 2, (case, done.stdout[-2000:], err[-3000:])
    assert "Traceback" not in err and "Invalid configuration" in err, err[-3000:]
    assert f"- {key}=" in err and named in err and "fix:" in err, err[-3000:]
    assert runs_in(tmp_path / "mlflow.db") == []
    run_dir = tmp_path / "run"
    assert not list(run_dir.glob("checkpoints/ckpt-*")) and not (run_dir / "model.keras").exists()
