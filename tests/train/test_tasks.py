"""Tasks: the resolver's rules (pure, fake environment), the label checks, metrics reduced across replicas.

The task's Keras objects: `launcher.train.tasks`.
"""

from __future__ import annotations

import numpy as np
import pytest
from fakes import CPU_PLAIN
from support.config import CONF_DIR, TINY, config

from launcher.config.errors import ConfigError
from launcher.plan.resolve import resolve, resolve_all


def test_every_task_in_the_table_has_its_yaml_and_builds_each_loss_and_metric_it_names():
    """A task is one table entry (`launcher.config.tasks`; the schema's TaskName is made from it), its YAML, and the
    Keras objects `launcher.train.tasks` builds for every loss and metric the entry names."""
    from launcher.config.schema import TaskName
    from launcher.config.tasks import TASKS
    from launcher.train.tasks import make_task

    assert {p.stem for p in (CONF_DIR / "task").glob("*.yaml")} == set(TASKS) == {t.value for t in TaskName}
    for name, spec in TASKS.items():
        assert set(spec.default_metrics) <= set(spec.metrics), name
        for loss in spec.losses:
            built = make_task(
                config(f"task={name}", f"task.loss={loss}", f"task.metrics=[{','.join(spec.metrics)}]").task
            )
            assert callable(built.loss), (name, loss)
            assert [m.name for m in built.train_metrics] == list(spec.metrics), name


def problems(*overrides):
    _, found = resolve_all(config(*overrides), CPU_PLAIN)
    return {(v.key, str(v.value)): v for v in found}


@pytest.mark.parametrize(
    "task, loss, metrics, objective",
    [
        ("classification", "crossentropy", ["accuracy"], "val_accuracy"),
        ("multilabel", "binary_crossentropy", ["auc", "precision", "recall"], "val_auc"),
        ("regression", "mse", ["mae", "rmse"], "val_loss"),
    ],
)
def test_each_task_decides_its_loss_metrics_and_objective(task, loss, metrics, objective):
    plan = resolve(config(f"task={task}"), CPU_PLAIN)
    assert (plan.task.name, plan.task.loss, plan.task.metrics, plan.task.objective) == (task, loss, metrics, objective)


def test_sequence_decides_a_masked_loss_and_perplexity():
    plan = resolve(config("task=sequence", "model=transformer"), CPU_PLAIN)
    assert plan.task.metrics == ["accuracy", "perplexity"]
    assert "padding tokens masked" in plan.task.reason("loss")


def test_accuracy_on_regression_is_refused_with_the_metrics_that_fit():
    found = problems("task=regression", "task.metrics=[accuracy,mae]")
    violation = found[("task.metrics", "accuracy")]
    assert "['mae', 'mse', 'rmse']" in violation.expected and violation.fix == "task.metrics=[mae]"


def test_a_loss_of_another_task_is_refused():
    violation = problems("task=regression", "task.loss=binary_crossentropy")[("task.loss", "binary_crossentropy")]
    assert "['mse', 'mae', 'huber']" in violation.expected


def test_sequence_needs_a_model_that_predicts_every_position():
    assert ("model", "mlp") in problems("task=sequence", "model=mlp")
    assert not problems("task=sequence", "model=transformer")


def test_a_monitor_the_task_does_not_log_is_refused_naming_the_ones_it_does():
    found = problems(
        "task=regression",
        "checkpoint.monitor=val_accuracy",
        "train.early_stopping.enabled=true",
        "train.early_stopping.monitor=accuracy",
    )
    assert "val_mae" in found[("checkpoint.monitor", "val_accuracy")].expected
    assert ("train.early_stopping.monitor", "accuracy") in found
    assert not problems("task=regression", "checkpoint.monitor=val_rmse", "checkpoint.mode=min")


def test_objective_auto_falls_back_to_val_loss_when_the_headline_metric_is_not_logged():
    assert resolve(config("task.metrics=[top5_accuracy]"), CPU_PLAIN).task.objective == "val_loss"
    assert (
        resolve(config("objective=val_top5_accuracy", "task.metrics=[top5_accuracy]"), CPU_PLAIN).task.objective
        == "val_top5_accuracy"
    )


def test_a_user_loss_is_computed_in_float32_and_the_plan_says_so():
    plan = resolve(config("precision=mixed", "task.loss=my_pkg.losses:focal"), CPU_PLAIN)
    assert plan.task.loss == "my_pkg.losses:focal"
    assert "never computes in float16" in plan.task.reason("loss")


def test_a_user_metric_defers_the_monitor_check_to_the_build():
    # Its logged name is only known once it is built: nothing refused here.
    assert not problems("task.metrics=[my_pkg.metrics:Mine]", "checkpoint.monitor=val_mine")


# ---------------------------------------------------------------- labels vs task


def source(x, y, kind="tabular"):
    from launcher.train.data import split_arrays

    return split_arrays(np.asarray(x), np.asarray(y), 0.25, 0, kind=kind)


def refusal(task, src, num_classes=0):
    from launcher.train.labels import fit_to_task

    with pytest.raises(ConfigError) as err:
        fit_to_task(src, task, num_classes)
    (violation,) = err.value.violations
    return violation


def test_float_labels_are_refused_for_classification_pointing_at_regression():
    x = np.zeros((8, 3), "float32")
    violation = refusal("classification", source(x, np.linspace(0, 1, 8).astype("float32")))
    assert violation.key == "task.name" and "task=regression" in violation.fix


def test_labels_beyond_the_configured_classes_are_refused():
    violation = refusal("classification", source(np.zeros((8, 3), "float32"), np.arange(8)), num_classes=5)
    assert (violation.key, violation.value) == ("dataset.num_classes", 5) and "num_classes=8" in violation.fix


def test_multilabel_needs_zero_one_rows_and_regression_finite_targets():
    x = np.zeros((8, 3), "float32")
    assert "0 or 1" in refusal("multilabel", source(x, np.full((8, 2), 2.0, "float32"))).expected
    assert "shape (N, labels)" in refusal("multilabel", source(x, np.arange(8))).expected
    assert "finite" in refusal("regression", source(x, np.array([0.0, np.nan] * 4, "float32"))).expected


def test_sequence_needs_token_inputs_and_next_token_labels():
    tokens = np.ones((8, 5), "int32")
    assert "token id inputs" in refusal("sequence", source(np.zeros((8, 5), "float32"), tokens)).expected
    assert "shaped like the inputs" in refusal("sequence", source(tokens, np.arange(8), kind="tokens")).expected


def test_labels_that_fit_set_the_output_width():
    from launcher.train.labels import fit_to_task

    x = np.random.default_rng(0).normal(size=(8, 3)).astype("float32")
    assert fit_to_task(source(x, np.ones((8, 4), "float32")), "multilabel").outputs == 4
    assert fit_to_task(source(x, np.ones((8, 2), "float32")), "regression").outputs == 2
    assert fit_to_task(source(x, np.arange(8) % 3), "classification").outputs == 3


# ------------------------------------------------ metrics across replicas


def evaluated(tmp_path, strategy, weights=None):
    from launcher.launch.training import TrainingLaunch
    from launcher.train.engine import Engine, EngineSettings

    overrides = [
        *TINY,
        "tracking.enabled=false",
        "checkpoint.enabled=false",
        "precision=fp32",
        "xla=false",
        "task=multilabel",
        "dataset=synthetic",
        "dataset.kind=tabular",
        "dataset.shape=[12]",
        "dataset.num_examples=203",
        "dataset.num_classes=3",
        "task.metrics=[auc,precision,recall]",
        "scaling.batch_rule=global",
        "scaling.batch_size=16",
        f"strategy={strategy}",
    ]
    launch = TrainingLaunch(config(*overrides), tmp_path / strategy, tmp_path, {})
    launch.prepare()
    launch.build()
    if weights is not None:
        launch.context.built.model.set_weights(weights)
    engine = Engine(launch.context.built, launch.context.plan, launch.context.source, EngineSettings(verbose=0))
    return engine, engine.evaluate()


@pytest.mark.slow  # two replicas: a multi-device run
def test_metrics_over_two_replicas_equal_one_device_on_every_example(tmp_path):
    """41 validation examples in batches of 16 split over 2 replicas (the last batch ragged): AUC, precision and
    recall summed over the replicas equal one device's and sklearn's over all 41 (a mean of per-replica or
    per-batch values would not)."""
    from sklearn.metrics import roc_auc_score

    single, logs = evaluated(tmp_path, "default")
    mirrored, mirrored_logs = evaluated(tmp_path, "mirrored", single.model.get_weights())
    assert mirrored.strategy.num_replicas_in_sync == 2
    for name in ("val_auc", "val_precision", "val_recall", "val_loss"):
        assert mirrored_logs[name] == pytest.approx(logs[name], abs=1e-5), name
    x, y = single.source.val
    probs = 1 / (1 + np.exp(-single.model.predict(x, verbose=0)))
    assert len(y) == 41
    per_label = np.mean([roc_auc_score(y[:, j], probs[:, j]) for j in range(y.shape[1])])
    assert logs["val_auc"] == pytest.approx(per_label, abs=0.02)  # Keras's AUC interpolates 200 thresholds
    predicted = probs > 0.5
    assert logs["val_precision"] == pytest.approx((predicted & (y > 0)).sum() / predicted.sum(), abs=1e-5)
    assert logs["val_recall"] == pytest.approx((predicted & (y > 0)).sum() / (y > 0).sum(), abs=1e-5)


def test_user_tf_data_loss_class_and_callback_in_one_run(tmp_path):
    """A loader returning tf.data, a Loss class (2 x MSE), a callback: the loss the engine reports is the user's
    (twice the mse metric on the same examples), and the callback sees every epoch's logs. The training split
    carries sample weights and validation none (issue 63, item 11: refused before): validation is unweighted."""
    import user_parts
    from support.config import compose

    from launcher.launch.training import execute

    user_parts.SEEN.clear()
    outcome = execute(
        compose(
            "model=custom",
            "model.builder=user_parts:linear",
            "dataset=custom",
            "dataset.loader=user_parts:tf_data",
            "+dataset.params.train_weights=true",
            "task=regression",
            "task.loss=user_parts:DoubledSquaredError",
            "task.metrics=[mse]",
            "train.callbacks=[user_parts:RecordingCallback]",
            "train.epochs=2",
            "scaling.batch_size=64",
            "xla=false",
            "precision=fp32",
            "tracking.enabled=false",
            "checkpoint.enabled=false",
        ),
        tmp_path / "run",
        tmp_path,
    )
    assert outcome.error is None
    final = outcome.result.final
    assert final["val_loss"] == pytest.approx(2 * final["val_mse"], rel=1e-5)
    x_val, y_val = next(iter(user_parts.tf_data()["val"].batch(1000)))
    unweighted = float(np.mean((outcome.model.predict(x_val.numpy(), verbose=0)[:, 0] - y_val.numpy()) ** 2))
    assert final["val_mse"] == pytest.approx(unweighted, rel=1e-4)
    assert [e["epoch"] for e in user_parts.SEEN] == [0, 1] and "val_mse" in user_parts.SEEN[-1]
    assert outcome.plan.schedule.steps_per_epoch == 3  # 192 tf.data examples counted, batches of 64
