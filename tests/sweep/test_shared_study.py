"""A study several sweepers share, in process on real storages (a journal file, SQLite): the storage URL checked and
opened, the heartbeat that tells a live trial from an abandoned one, the count of trials that stays `n_trials`,
the one sweeper that summarises. The sweepers as processes: tests/reliability/test_shared_search.py."""

from __future__ import annotations

import time

import optuna
import pytest
from omegaconf import OmegaConf
from optuna.trial import TrialState

from launcher.config import study_storage
from launcher.config.study_storage import Heartbeat, open_storage, storage_problems
from launcher.sweep import shared
from launcher.sweep.search_report import write_report
from launcher.sweep.shared import (
    SURPLUS,
    SharedStudy,
    counted,
    fail_stale,
    is_surplus,
    quiet_heartbeat_warnings,
    retried_from,
    tell_told,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)
quiet_heartbeat_warnings()


@pytest.mark.parametrize(
    ("url", "fix"),
    [
        ("journal://", "hydra.sweeper.storage=journal:///shared/folder/study.log"),
        ("nosuchdb://host/db", "hydra.sweeper.storage=journal:///shared/folder/study.log"),
        ("not a url", "hydra.sweeper.storage=journal:///shared/folder/study.log"),
        ("mysql+mysqldb://u:p@127.0.0.1/db", "pip install 'mysqlclient'"),
    ],
)
def test_a_storage_optuna_cannot_open_is_refused_with_its_fix(url, fix):
    problems = storage_problems(url)
    assert len(problems) == 1 and problems[0].key == "hydra.sweeper.storage"
    assert problems[0].fix == fix and "journal:///path.log" in problems[0].expected


def test_every_form_optuna_takes_opens_as_its_storage_not_as_a_string(tmp_path):
    """The bug: anything but SQLite came back as the URL string, and the search crashed on its first call."""
    assert storage_problems(f"journal://{tmp_path}/j/study.log") == []
    assert storage_problems(f"sqlite:///{tmp_path}/s.db") == []
    assert storage_problems("postgresql://u:p@127.0.0.1:9/optuna") == []  # driver installed; the server is not asked
    journal = open_storage(f"journal://{tmp_path}/j/study.log")
    assert isinstance(journal, optuna.storages.JournalStorage)
    rdb = open_storage(f"sqlite:///{tmp_path}/s.db", Heartbeat(1, 2, 1))
    assert isinstance(rdb, optuna.storages.RDBStorage) and rdb.get_heartbeat_interval() == 1
    for storage in (journal, rdb):
        study = optuna.create_study(study_name="s", storage=storage)
        study.tell(study.ask(), 1.0)
        assert storage.get_study_id_from_name("s") is not None


def _study(tmp_path, heartbeat=None, form="journal"):
    url = f"journal://{tmp_path}/study.log" if form == "journal" else f"sqlite:///{tmp_path}/study.db"
    storage = open_storage(url, heartbeat)
    return storage, optuna.create_study(study_name="s", storage=storage, load_if_exists=True)


@pytest.mark.parametrize("form", ["journal", "sqlite"])
def test_a_trial_whose_sweeper_stopped_beating_is_failed_and_queued_again_a_beating_one_is_left(
    tmp_path, monkeypatch, form
):
    storage, study = _study(tmp_path, Heartbeat(interval=1, grace_period=2, retries=1), form)
    alive, dead = study.ask(), study.ask()
    alive.suggest_float("x", 0, 1)
    dead.suggest_float("x", 0, 1)
    with shared.beating(storage, study, [alive.number]):
        storage.record_heartbeat(dead._trial_id)  # its sweeper beat once, then died
        time.sleep(3.2)
        assert fail_stale(study) == [dead.number]
    trials = study.get_trials(deepcopy=False)
    assert [t.state for t in trials[:2]] == [TrialState.RUNNING, TrialState.FAIL]
    retry = study.ask()  # the queued copy comes first, with the dead trial's values
    assert retried_from(retry) == dead.number
    assert retry.suggest_float("x", 0, 1) == trials[1].params["x"]
    assert [t.number for t in counted(study)] == [alive.number, retry.number]  # the failed one counts no more
    study.tell(alive, 0.5)
    study.tell(retry, 0.7)
    report = write_report(study, ["value"], tmp_path / "report")
    assert report["trials"] == 2 and report["states"]["complete"] == 2 and report["queued_again"] == 1


def test_a_surplus_ask_is_failed_marked_and_never_counted(tmp_path):
    _, study = _study(tmp_path)
    first, second = study.ask(), study.ask()  # two sweepers asked the last of total=1 at once
    assert not is_surplus(study, first, total=1)
    assert is_surplus(study, second, total=1)
    frozen = study.get_trials(deepcopy=False)[1]
    assert frozen.state == TrialState.FAIL and frozen.user_attrs[SURPLUS] is True
    assert [t.number for t in counted(study)] == [first.number]


def _search_config(url: str):
    return OmegaConf.create(
        {
            "objective": "val_accuracy",
            "task": {"name": "classification"},
            "hydra": {"sweeper": {"_target_": "x.SearchSweeper", "storage": url, "study_name": "s"}},
        }
    )


def test_the_first_sweeper_creates_the_study_and_the_others_join_its_sweep_id_and_parent(tmp_path, monkeypatch):
    url = f"journal://{tmp_path}/study.log"
    config = _search_config(url)
    assert SharedStudy.of(OmegaConf.create({"hydra": {"sweeper": {"_target_": "x.SearchSweeper"}}})) is None
    study = SharedStudy.of(config)
    sweep_id, created = study.join(config)
    again, joined = study.join(config)
    assert created and not joined and again == sweep_id
    study.record_parent("sqlite:////tmp/m.db", "run-1")
    assert study.recorded_parent("sqlite:////tmp/m.db", creator=False) == "run-1"
    monkeypatch.setattr(shared, "WAIT", 0.1)
    assert study.recorded_parent("sqlite:////elsewhere.db", creator=False) is None  # another store: its own parent
    loaded = optuna.load_study(study_name="s", storage=open_storage(url))
    assert loaded.directions == [optuna.study.StudyDirection.MAXIMIZE]


def test_only_the_sweeper_that_told_the_last_trial_summarises_and_only_when_the_study_is_done(tmp_path, monkeypatch):
    url = f"journal://{tmp_path}/study.log"
    storage, study = _study(tmp_path)
    config = _search_config(url)
    shared_study = SharedStudy.of(config)
    first, second = study.ask(), study.ask()
    monkeypatch.setattr(shared, "SWEEPER", "a:1")
    tell_told(storage, study, first.number, values=[0.5])
    assert not shared_study.summarised_here()  # the second still runs
    monkeypatch.setattr(shared, "SWEEPER", "b:2")
    tell_told(storage, study, second.number, values=[0.7])
    assert shared_study.summarised_here()
    monkeypatch.setattr(shared, "SWEEPER", "a:1")
    assert not shared_study.summarised_here()


def test_telling_a_trial_another_sweeper_failed_meanwhile_leaves_it_failed(tmp_path, capsys):
    storage, study = _study(tmp_path)
    trial = study.ask()
    study.tell(trial, state=TrialState.FAIL)  # failed as stale by another sweeper
    tell_told(storage, study, trial.number, values=[0.9])
    assert study.get_trials()[0].state == TrialState.FAIL
    assert "failed meanwhile by another sweeper" in capsys.readouterr().out


def test_the_journal_heartbeat_keeps_its_beats_on_the_trial(tmp_path, monkeypatch):
    storage, study = _study(tmp_path, Heartbeat(interval=5, grace_period=10, retries=0))
    trial = study.ask()
    now = time.time()
    monkeypatch.setattr(study_storage.time, "time", lambda: now + 8)
    storage.record_heartbeat(trial._trial_id)
    monkeypatch.setattr(study_storage.time, "time", lambda: now + 17)
    assert storage._get_stale_trial_ids(study._study_id) == []  # beat at +8, 9 s ago
    monkeypatch.setattr(study_storage.time, "time", lambda: now + 19)
    assert storage._get_stale_trial_ids(study._study_id) == [trial._trial_id]


def test_a_database_that_does_not_answer_is_refused_with_its_password_hidden(monkeypatch):
    from launcher.config.errors import ConfigError

    monkeypatch.setattr(study_storage.time, "sleep", lambda seconds: None)  # the retries of a first open
    with pytest.raises(ConfigError) as refused:
        open_storage("postgresql://u:hunter2@127.0.0.1:9/optuna")
    message = str(refused.value)
    assert "hydra.sweeper.storage='postgresql://u:***@127.0.0.1:9/optuna': expected a database that answers" in message
    assert "Connection refused" in message and "hunter2" not in message and "journal:///" in message


def test_a_shared_study_is_named_by_the_search_unless_one_is_given(tmp_path):
    """Two searches (`name=s1`, `name=s2`) on one database never pull from one study; a study of its own keeps its
    default name."""
    from launcher.config.study_storage import study_name

    config = _search_config(f"journal://{tmp_path}/study.log")
    config.hydra.sweeper.study_name = "launcher"
    config.name = "s2"
    assert SharedStudy.of(config).name == "s2"
    config.hydra.sweeper.study_name = "mine"
    assert SharedStudy.of(config).name == "mine"
    assert study_name("launcher", "s2", shared=False) == "launcher"


def test_a_trial_its_study_ended_meanwhile_stops_reporting_instead_of_failing_its_run(tmp_path, capsys):
    from launcher.launch.trial import Trial

    _, study = _study(tmp_path)
    handle = study.ask()
    study.tell(handle, state=TrialState.FAIL)  # failed as stale: its sweeper went silent past the grace period
    trial = Trial(handle.number, "val_accuracy", True, handle)
    trial.report(0.5, 1)
    trial.report(0.6, 2)
    assert trial.closed and not trial.should_prune()
    assert capsys.readouterr().out.count("was ended by its study meanwhile") == 1


def test_a_sweeper_that_ran_nothing_summarises_a_done_study_whose_parent_was_left_running(tmp_path, monkeypatch):
    """The sweeper that ended the last trial died before summarising: the next one to find the study done ends
    the parent; one that finds it FINISHED leaves it."""
    from mlflow.tracking import MlflowClient

    url = f"journal://{tmp_path}/study.log"
    storage, study = _study(tmp_path)
    monkeypatch.setattr(shared, "SWEEPER", "dead:1:x")
    tell_told(storage, study, study.ask().number, values=[0.5])
    monkeypatch.setattr(shared, "SWEEPER", "late:2:y")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    parent = client.create_run(client.create_experiment("e")).info.run_id
    shared_study = SharedStudy.of(_search_config(url))
    assert shared_study.summarises(uri, parent)
    client.set_terminated(parent, "FINISHED")
    assert not shared_study.summarises(uri, parent)


def test_a_trial_run_killed_before_its_params_is_found_by_its_birth_tag_and_failed(tmp_path):
    """The flake that found it: the dead sweeper's child had been made (and remembered) but not yet given its
    params, so the sweeper that failed its trial could not find it, and the run stayed RUNNING for ever."""
    from mlflow.tracking import MlflowClient

    from launcher.files import SWEEP_FILE, write_json_atomic
    from launcher.launch.mlflow_run import birth_tags
    from launcher.sweep.job import settle_abandoned

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("e")
    parent = client.create_run(experiment).info.run_id
    write_json_atomic(tmp_path / SWEEP_FILE, {"parent_run_id": parent, "uri": uri})
    trial_config = OmegaConf.create({"sweep": {"trial": 3}})
    made = {}
    for number in (3, 4):  # 3 killed at birth; 4 its sweeper's, alive
        tags = {"mlflow.parentRunId": parent, **birth_tags(OmegaConf.create({"sweep": {"trial": number}}))}
        made[number] = client.create_run(experiment, tags=tags).info.run_id
    assert (
        birth_tags(trial_config) == {"sweep.trial": "3"}
        and birth_tags(OmegaConf.create({"sweep": {"trial": None}})) == {}
    )
    settle_abandoned(tmp_path, [3])
    killed, alive = client.get_run(made[3]), client.get_run(made[4])
    assert killed.info.status == "FAILED" and "stopped beating" in killed.data.tags["error"]
    assert alive.info.status == "RUNNING"
