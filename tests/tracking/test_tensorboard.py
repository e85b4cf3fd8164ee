"""tracking.tensorboard=true: the run's MLflow scalars and its Plan as a TensorBoard event log, read back with
TensorBoard's own reader, and the log is an artifact of the MLflow run.

The mirror: `launcher.tracking.tensorboard`.
"""

from __future__ import annotations

import pytest
from support.config import TINY, compose
from support.tracking import store

from launcher.launch.training import execute


@pytest.mark.slow  # a tracked training, seconds of CPU in this process
def test_the_event_log_holds_the_step_and_epoch_scalars_and_the_plan_and_is_an_mlflow_artifact(tmp_path):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    uri = store(tmp_path / "m.db")
    overrides = ["precision=fp32", "tracking.step_metrics_every=8", "tracking.system_metrics=false"]
    node = compose(*TINY, *overrides, f"tracking.uri={uri}", "tracking.log_model=false", "tracking.tensorboard=true")
    outcome = execute(node, tmp_path / "run", tmp_path)
    assert outcome.error is None, outcome.error
    steps = outcome.plan.schedule.total_steps

    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    scalars = {
        tag: [(e.step, float(make_ndarray(e.tensor_proto))) for e in events.Tensors(tag)]
        for tag in events.Tags()["tensors"]
        if tag != "plan"
    }
    client = MlflowClient(uri)
    for name in ("loss", "val_loss", "val_accuracy", "step/loss", "step/learning_rate"):
        logged = [(m.step, m.value) for m in client.get_metric_history(outcome.run_id, name)]
        assert logged, name
        assert [s for s, _ in scalars[name]] == [s for s, _ in logged], name  # the same points, same x axis
        for (_, ours), (_, theirs) in zip(scalars[name], logged, strict=True):
            assert abs(ours - theirs) <= 1e-6 * max(1.0, abs(theirs)), name
    assert [s for s, _ in scalars["step/loss"]] == list(range(8, steps + 1, 8))
    assert [s for s, _ in scalars["loss"]] == [0, 1]  # epochs
    (plan,) = events.Tensors("plan")
    assert b"precision" in make_ndarray(plan.tensor_proto).item()

    artifacts = {a.path for a in client.list_artifacts(outcome.run_id, "tensorboard")}
    assert any(path.startswith("tensorboard/events.out.tfevents") for path in artifacts), artifacts


@pytest.mark.slow  # a tracked training, seconds of CPU in this process
def test_without_the_switch_no_event_log_is_written(tmp_path):
    node = compose(*TINY, "precision=fp32", "tracking.enabled=false")
    assert execute(node, tmp_path / "run", tmp_path).error is None
    assert not (tmp_path / "run" / "tensorboard").exists()
