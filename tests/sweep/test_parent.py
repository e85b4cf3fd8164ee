"""The sweep's parent run is never made twice: a sweep killed between MLflow making its parent and the sweep dir
recording it finds that run when it is run again (the callback in this process, a real SQLite store)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from support.tracking import store

from launcher.files import SWEEP_FILE, read_json
from launcher.sweep import callback


class _Killed(BaseException):
    """What SIGKILL does to the sweep process, at the one point a test names."""


def _config(tmp_path, uri: str):
    return OmegaConf.create(
        {
            "tf_logs": False,
            "tracking": {"enabled": True, "uri": uri, "experiment": "launcher"},
            "hydra": {
                "launcher": {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"},
                "sweep": {"dir": str(tmp_path / "sweep")},
                "sweeper": {"params": None},
                "overrides": {"task": ["precision=fp32,bf16"]},
            },
        }
    )


def _parents(uri: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("launcher")
    return client.search_runs([experiment.experiment_id]) if experiment else []


@pytest.fixture
def sweep_start(monkeypatch):
    monkeypatch.setattr(callback.forkserver, "share", lambda: None)  # no jobs start here
    return lambda config: callback.SweepCallback().on_multirun_start(config)


def test_a_sweep_killed_before_it_recorded_its_parent_finds_that_run_when_rerun(tmp_path, monkeypatch, sweep_start):
    from mlflow.tracking import MlflowClient

    uri = store(tmp_path / "mlflow.db")
    config = _config(tmp_path, uri)
    real_create = MlflowClient.create_run

    def create_then_die(self, *args, **kwargs):
        real_create(self, *args, **kwargs)
        raise _Killed

    with monkeypatch.context() as patch:
        patch.setattr(MlflowClient, "create_run", create_then_die)
        with pytest.raises(_Killed):
            sweep_start(config)
    killed = read_json(tmp_path / "sweep" / SWEEP_FILE)
    assert killed["parent_run_id"] is None and len(_parents(uri)) == 1  # the run exists, unrecorded

    sweep_start(config)
    state = read_json(tmp_path / "sweep" / SWEEP_FILE)
    runs = _parents(uri)
    assert [r.info.run_id for r in runs] == [state["parent_run_id"]]  # that run, not a second parent
    assert state["sweep_id"] == killed["sweep_id"] and state["uri"] == uri
    tags = runs[0].data.tags
    assert tags["sweep.role"] == "parent" and tags["sweep_id"] == state["sweep_id"]
    assert tags["sweep.dir"] == str(tmp_path / "sweep") and tags["sweep.overrides"] == "precision=fp32,bf16"


def test_a_sweep_killed_before_mlflow_made_its_parent_makes_one_when_rerun(tmp_path, monkeypatch, sweep_start):
    from mlflow.tracking import MlflowClient

    uri = store(tmp_path / "mlflow.db")
    config = _config(tmp_path, uri)

    def die(self, *args, **kwargs):
        raise _Killed

    with monkeypatch.context() as patch:
        patch.setattr(MlflowClient, "create_run", die)
        with pytest.raises(_Killed):
            sweep_start(config)
    assert _parents(uri) == []
    sweep_start(config)
    state = read_json(tmp_path / "sweep" / SWEEP_FILE)
    assert [r.info.run_id for r in _parents(uri)] == [state["parent_run_id"]]
    assert state["runs"] == 2  # the same sweep, run a second time


def test_a_new_sweep_records_its_parent_once(tmp_path, sweep_start):
    uri = store(tmp_path / "mlflow.db")
    sweep_start(_config(tmp_path, uri))
    state = read_json(tmp_path / "sweep" / SWEEP_FILE)
    runs = _parents(uri)
    assert [r.info.run_id for r in runs] == [state["parent_run_id"]] and "runs" not in state
    assert runs[0].data.tags["sweep_id"] == state["sweep_id"]
