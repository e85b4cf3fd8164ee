"""The run's curves (`launcher.launch.curves`): a panel per metric from the epoch logs the launch holds, train and
val on the same axes, curves.png in the run dir and among the MLflow artifacts; a failed run's and a resumed run's
too. The real run's file and artifact: tests/e2e/test_cli.py::test_default_run_trains_and_logs_everything_to_mlflow."""

from __future__ import annotations

from types import SimpleNamespace

from launcher.launch.curves import series, write_curves

HISTORY = [
    {"epoch": 0, "global_step": 10, "loss": 1.0, "accuracy": 0.5, "val_loss": 1.1, "val_accuracy": 0.4, "lr": 0.1},
    {"epoch": 1, "global_step": 15, "loss": 0.9, "accuracy": 0.6},  # stopped inside epoch 2, then resumed:
    {"epoch": 1, "global_step": 20, "loss": 0.8, "accuracy": 0.7, "val_loss": 0.9, "val_accuracy": 0.6, "lr": 0.1},
    {"epoch": 2, "global_step": 30, "loss": 0.7, "accuracy": 0.8},  # a failed run's last epoch, not validated
]


def test_a_panel_per_metric_with_train_and_val_by_epoch_the_last_log_of_an_epoch_counting():
    panels = series(HISTORY, ["accuracy", "auc"])
    assert list(panels) == ["loss", "accuracy"]  # the loss first; a metric never logged has no panel; lr is none
    assert panels["loss"]["train"] == ([1, 2, 3], [1.0, 0.8, 0.7])
    assert panels["accuracy"]["val"] == ([1, 2], [0.4, 0.6])
    assert series([], ["accuracy"]) == {}


class Tracker:
    def __init__(self):
        self.artifacts = []

    def log_artifact(self, path, artifact_path=None):
        self.artifacts.append(path)


def launch(run_dir, chief=True):
    metric = SimpleNamespace(name="accuracy")
    return SimpleNamespace(
        plan=SimpleNamespace(is_chief=chief),
        built=SimpleNamespace(task=SimpleNamespace(train_metrics=[metric])),
        run_dir=run_dir,
        tracker=Tracker(),
    )


def test_the_chief_writes_curves_png_in_the_run_dir_and_logs_it(tmp_path, capsys):
    context = launch(tmp_path)
    path = write_curves(context, HISTORY)
    assert path == tmp_path / "curves.png" and path.read_bytes().startswith(b"\x89PNG")
    assert context.tracker.artifacts == [path]
    assert [p.name for p in tmp_path.iterdir()] == ["curves.png"]  # nothing half-written left beside it
    assert write_curves(launch(tmp_path / "worker", chief=False), HISTORY) is None  # the chief's alone
    assert write_curves(launch(tmp_path / "none"), []) is None  # no epoch: no picture
    assert write_curves(launch(tmp_path / "none"), HISTORY[:1]) is None  # one epoch: a point, not a curve


def test_a_picture_that_cannot_be_drawn_is_a_warning_not_a_failed_run(tmp_path, capsys):
    context = launch(tmp_path / "gone")  # no such run dir
    assert write_curves(context, HISTORY) is None and context.tracker.artifacts == []
    assert "WARNING: the curves were not drawn (FileNotFoundError" in capsys.readouterr().err
