"""Every task through the real CLI under float16 + MirroredStrategy + XLA, down to its metrics in MLflow."""

from __future__ import annotations

import pytest

HARD = [
    "precision=mixed",
    "strategy=mirrored",
    "xla=true",
    "checkpoint.export_model=false",
    "tracking.log_model=false",
    "tracking.system_metrics=false",
    "train.measure_utilization=false",
    "checkpoint.enabled=false",
]
TABULAR = ["dataset=synthetic", "dataset.kind=tabular", "dataset.shape=[16]", "dataset.num_examples=1536"]

CASES = {
    # task: (overrides, metrics that must be logged, metrics that must not, {metric: upper or (lower,) bound})
    "regression": (
        ["task=regression", *TABULAR, "train.epochs=4"],
        ["val_mae", "val_rmse"],
        ["val_accuracy", "accuracy"],
        {"val_loss": 0.15, "val_rmse": 0.4},
    ),
    "multilabel": (
        ["task=multilabel", *TABULAR, "dataset.num_classes=5", "train.epochs=5"],
        ["val_auc", "val_precision", "val_recall", "auc"],
        ["val_accuracy"],
        {"val_loss": 0.45, "val_auc": (0.85,)},
    ),
    "sequence": (
        [
            "task=sequence",
            "model=transformer",
            "dataset=synthetic",
            "dataset.kind=tokens",
            "dataset.shape=[16]",
            "dataset.vocab_size=32",
            "dataset.num_examples=1280",
            # One layer: the run's CPU is the first step's XLA compile (9 CPU-s for one layer, 14 for the default
            # two); its epochs are ~0.15 CPU-s each, so two more (0.78 val_accuracy after 5, 0.59 after 3).
            "model.num_layers=1",
            "train.epochs=5",
        ],
        ["val_accuracy", "val_perplexity", "perplexity"],
        [],
        {"val_loss": 2.0, "val_perplexity": 8.0, "val_accuracy": (0.5,)},
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(CASES))
def test_task_trains_under_float16_mirrored_xla_to_its_threshold(cli_here, tmp_path, task):
    overrides, logged, absent, bounds = CASES[task]
    done = cli_here(*HARD, *overrides, "scaling.batch_size=32")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    assert run.info.status == "FINISHED"
    assert (run.data.tags["plan.task"], run.data.tags["plan.step"], run.data.tags["plan.replicas"]) == (
        task,
        "replica_xla",
        "2",
    )
    metrics = run.data.metrics
    for name in logged:
        assert name in metrics, (name, sorted(metrics))
    for name in absent:
        assert name not in metrics, name
    for name, bound in bounds.items():
        if isinstance(bound, tuple):
            assert metrics[name] > bound[0], (name, metrics[name])
        else:
            assert metrics[name] < bound, (name, metrics[name])
    # The metrics are per epoch, one point each.
    assert len(client.get_metric_history(run.info.run_id, logged[0])) == int(run.data.params["train.epochs"])
