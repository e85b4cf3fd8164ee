"""The sweep parent's record (pure): swept keys with their values, the best child's metrics and name."""

from __future__ import annotations

from types import SimpleNamespace

from launcher.sweep.summary import (
    best_lines,
    best_run,
    minimises,
    parent_record,
    swept_values,
    table_rows,
    unswept_differences,
)


def _run(name, status="FINISHED", params=None, **metrics):
    return SimpleNamespace(
        info=SimpleNamespace(run_name=name, run_id=f"id-{name}", status=status),
        data=SimpleNamespace(params=params or {}, metrics=metrics, tags={"sweep.overrides": name}),
    )


RUNS = [
    _run(
        "precision=fp32,optimizer.learning_rate=0.01",
        params={"optimizer.learning_rate": "0.01"},
        val_accuracy=0.80,
        val_loss=0.6,
        loss=0.5,
    ),
    _run(
        "precision=bf16,optimizer.learning_rate=0.1",
        params={"optimizer.learning_rate": "0.1"},
        val_accuracy=0.90,
        val_loss=0.7,
        loss=0.4,
        test_accuracy=0.88,
    ),
    _run(
        "precision=mixed,optimizer.learning_rate=0.1",
        status="FAILED",
        params={"optimizer.learning_rate": "0.1"},
        val_accuracy=0.99,
    ),
]


JOBS = [
    ["precision=fp32", "optimizer.learning_rate=0.01", "train.epochs=2"],
    ["precision=bf16", "optimizer.learning_rate=0.1", "train.epochs=2"],
    ["precision=mixed", "optimizer.learning_rate=0.1", "train.epochs=2"],
]


def test_the_parent_gets_the_swept_values_and_the_best_finished_childs_metrics():
    params, metrics, tags = parent_record(RUNS, JOBS, ["precision", "optimizer.learning_rate"], "val_accuracy")
    assert params == {"sweep.precision": "bf16,fp32,mixed", "sweep.optimizer.learning_rate": "0.01,0.1"}
    # The best child by the objective, with its test result beside it (train.test_at_end); never chosen by it.
    assert metrics == {
        "val_accuracy": 0.90,
        "val_loss": 0.7,
        "loss": 0.4,
        "test_accuracy": 0.88,
        "best.val_accuracy": 0.90,
    }
    assert tags["sweep.best_run_id"] == "id-precision=bf16,optimizer.learning_rate=0.1"  # the failed 0.99 is not best
    assert tags["sweep.best_overrides"] == "precision=bf16,optimizer.learning_rate=0.1"


def test_losses_are_minimised_unless_the_sweeper_says_otherwise():
    assert minimises("val_loss") and not minimises("val_accuracy")
    assert not minimises("val_loss", "maximize") and minimises("val_accuracy", "MINIMIZE")
    assert best_run(RUNS, "val_loss").info.run_name.startswith("precision=fp32")


def test_the_sweep_s_end_names_the_best_job_its_value_run_dir_and_what_mattered_most():
    best = _run("precision=bf16,optimizer.learning_rate=0.1", val_accuracy=0.9125)
    best.data.tags["run_dir"] = "outputs/multirun/s/1"
    report = {"importances": {"val_accuracy": {"scaling.batch_size": 0.05, "optimizer.learning_rate": 0.8, "x": 0.1}}}
    assert best_lines([RUNS[0], best, RUNS[2]], "val_accuracy", report=report) == [
        "Best job: precision=bf16,optimizer.learning_rate=0.1",
        "  val_accuracy         0.9125",
        "  run dir              outputs/multirun/s/1",
        "  MLflow run id        id-precision=bf16,optimizer.learning_rate=0.1",
        "Importances (what mattered most): optimizer.learning_rate 0.80, x 0.10, scaling.batch_size 0.05",
    ]
    assert best_lines([RUNS[2]], "val_accuracy") == []  # no finished job: no best to name


def test_lower_is_better_for_losses_errors_and_the_regression_errors():
    assert minimises("val_mae") and minimises("val_rmse") and minimises("val_perplexity")
    assert not minimises("val_auc") and not minimises("val_precision")


def test_a_sweep_without_a_finished_child_has_no_best():
    params, metrics, tags = parent_record([RUNS[2]], JOBS[2:], ["precision"], "val_accuracy")
    assert metrics == {} and "sweep.best_run_id" not in tags and params == {"sweep.precision": "mixed"}


def test_swept_values_keep_list_values_whole_and_leave_unswept_keys_out():
    jobs = [["model.hidden_units=[256,128]", "+seed=1"], ["model.hidden_units=[64]", "+seed=2"]]
    assert swept_values(jobs, ["model.hidden_units", "seed", "precision"]) == {
        "sweep.model.hidden_units": "[256,128],[64]",
        "sweep.seed": "1,2",
    }


def test_the_sweep_table_has_a_column_for_each_test_metric_any_job_logged():
    rows = table_rows(RUNS)
    assert [row["test_accuracy"] for row in rows] == ["", 0.88, ""]


def _derived(name, batch, lr, steps):
    params = {"derived.batch.global": batch, "derived.lr": lr, "derived.train.steps_per_epoch": steps}
    return _run(name, params=params, val_accuracy=0.8)


def test_derived_values_the_sweep_did_not_vary_are_named_with_the_fix():
    """Issue 62, item 5: `-m precision=... strategy=default,mirrored` ran the mirrored jobs at global batch 128
    (per_replica rule), half the steps; a reader concluded "mirrored is worse"."""
    rows = table_rows(
        [_derived("strategy=default", "64", "0.001", "22"), _derived("strategy=mirrored", "128", "0.001", "11")]
    )
    (batch,) = unswept_differences(rows, ["precision", "+strategy"])  # steps follow the strategy: not named again
    assert batch.startswith("batch.global differs between jobs (64, 128) though the sweep varies none of scaling,")
    assert "it follows precision, strategy. fix: scaling.batch_rule=global" in batch
    ragged = table_rows([_derived("lr=0.001", "64", "0.001", "22"), _derived("lr=0.01", "64", "0.01", "11")])
    (steps,) = unswept_differences(ragged, ["optimizer.learning_rate"])
    assert steps.startswith("train.steps_per_epoch differs between jobs (11, 22) though the sweep varies none of")
    # Swept on purpose: nothing to say.
    assert unswept_differences(rows, ["scaling.batch_size"]) == []
    same = table_rows([_derived("a", "64", "0.001", "22"), _derived("b", "64", "0.01", "22")])
    assert unswept_differences(same, ["optimizer.learning_rate"]) == []
