"""The registry after a sweep (`launcher.sweep.champion`): the `champion` alias of `tracking.register_model` goes to
the best trial's version only when it beats the version holding it, and the sweep's parent run says which and why.

Real SQLite MLflow stores; each trial is a child run of a sweep's parent with its final metrics, and registers its
version the way a launch does (`launcher.tracking.writes.Register`)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from support.tracking import store

from launcher.files import SWEEP_FILE, read_json
from launcher.sweep import callback
from launcher.sweep.champion import ALIAS, TAG_CHAMPION, TAG_REASON, VERSION_OBJECTIVE, Goal, crown, goal_of
from launcher.tracking.writes import Register

MODEL = "digits"
ACCURACY = Goal(MODEL, ("val_accuracy",), ("maximize",))


@pytest.fixture
def client(tmp_path):
    from mlflow.tracking import MlflowClient

    found = MlflowClient(store(tmp_path / "mlflow.db"))
    found.experiment = found.create_experiment("launcher")
    return found


def trial(client, parent: str, status="FINISHED", register=True, pruned=False, **metrics) -> str:
    """A sweep job's child run with its final metrics; its version of MODEL when it registered one."""
    run = client.create_run(
        client.experiment, tags={"mlflow.parentRunId": parent, **({"pruned": "true"} if pruned else {})}
    )
    for key, value in metrics.items():
        client.log_metric(run.info.run_id, key, value)
    if register:
        Register(MODEL, "mlflow_model").apply(client, run.info.run_id)
    client.set_terminated(run.info.run_id, status)
    return run.info.run_id


def sweep(client, *trials: dict) -> tuple[str, list[str]]:
    """A sweep's parent run, still RUNNING (as it is when the champion is chosen), and its trials' run ids."""
    parent = client.create_run(client.experiment, tags={"sweep.role": "parent"}).info.run_id
    return parent, [trial(client, parent, **t) for t in trials]


def version_of(client, run_id: str) -> str:
    (found,) = [v for v in client.search_model_versions(f"name='{MODEL}'") if v.run_id == run_id]
    return str(found.version)


def holder(client) -> str | None:
    found = client.get_registered_model(MODEL).aliases.get(ALIAS)
    return None if found is None else str(found)


def tags(client, parent: str) -> dict:
    return client.get_run(parent).data.tags


def test_the_alias_goes_to_the_best_trial_that_finished_and_registered_and_the_parent_says_why(client):
    parent, (low, best, failed, pruned, unregistered) = sweep(
        client,
        {"val_accuracy": 0.80},
        {"val_accuracy": 0.90},
        {"val_accuracy": 0.99, "status": "FAILED"},  # registered, then failed: never chosen
        {"val_accuracy": 0.97, "pruned": True},  # FINISHED, but its metrics are an early epoch's
        {"val_accuracy": 0.95, "register": False},  # better, but no version to serve
    )
    line = crown(client.tracking_uri, parent, ACCURACY)
    chosen = version_of(client, best)
    assert holder(client) == chosen
    said = tags(client, parent)
    assert said[TAG_CHAMPION] == f"{MODEL} v{chosen}"
    assert said[TAG_REASON].startswith(f"val_accuracy 0.9 of v{chosen} (run {best}); no version held the alias")
    assert "scored better but registered no version" in said[TAG_REASON]
    assert line == f"Registry: {MODEL}@{ALIAS} -> v{chosen}: {said[TAG_REASON]}"
    # The version says what it won on, for the next sweep's comparison.
    assert client.get_model_version(MODEL, chosen).tags[VERSION_OBJECTIVE] == "val_accuracy"


def test_a_worse_sweep_leaves_the_alias_where_it_is_and_a_better_one_takes_it(client):
    first, (champion,) = sweep(client, {"val_accuracy": 0.90})
    crown(client.tracking_uri, first, ACCURACY)
    held = version_of(client, champion)

    worse, (weaker,) = sweep(client, {"val_accuracy": 0.85})
    crown(client.tracking_uri, worse, ACCURACY)
    assert holder(client) == held
    said = tags(client, worse)
    assert said[TAG_CHAMPION] == f"{MODEL} v{held}"
    assert said[TAG_REASON] == (
        f"kept v{held}: the sweep's best, v{version_of(client, weaker)} (run {weaker}), has val_accuracy 0.85, "
        f"not above 0.9 of v{held} (run {champion})"
    )

    tie, _ = sweep(client, {"val_accuracy": 0.90})  # a tie is no better: the holder stays
    crown(client.tracking_uri, tie, ACCURACY)
    assert holder(client) == held and tags(client, tie)[TAG_REASON].startswith(f"kept v{held}")

    better, (stronger,) = sweep(client, {"val_accuracy": 0.93})
    line = crown(client.tracking_uri, better, ACCURACY)
    assert holder(client) == version_of(client, stronger)
    assert tags(client, better)[TAG_REASON] == f"val_accuracy 0.93 (run {stronger}) > 0.9 of v{held} (run {champion})"
    assert line.startswith(f"Registry: {MODEL}@{ALIAS} -> v{version_of(client, stronger)}: ")


@pytest.mark.parametrize(
    "direction, first, stays, better, sign",
    [("minimize", 0.2, "not below 0.2", 0.15, "<"), ("maximize", 0.3, "not above 0.3", 0.35, ">")],
    ids=["minimize", "maximize"],
)
def test_the_direction_decides_the_best_trial_and_whether_it_beats_the_holder(
    client, direction, first, stays, better, sign
):
    goal = Goal(MODEL, ("val_loss",), (direction,))
    parent, runs = sweep(client, {"val_loss": 0.30}, {"val_loss": 0.20})
    crown(client.tracking_uri, parent, goal)
    (best,) = [r for r in runs if client.get_run(r).data.metrics["val_loss"] == first]
    assert holder(client) == version_of(client, best)
    # 0.25 is worse than the holder either way: below 0.3 when maximising, above 0.2 when minimising.
    later, _ = sweep(client, {"val_loss": 0.25})
    crown(client.tracking_uri, later, goal)
    assert holder(client) == version_of(client, best)
    assert f"val_loss 0.25, {stays} of v{version_of(client, best)}" in tags(client, later)[TAG_REASON]
    last, (winner,) = sweep(client, {"val_loss": better})
    crown(client.tracking_uri, last, goal)
    assert holder(client) == version_of(client, winner)
    assert tags(client, last)[TAG_REASON].startswith(f"val_loss {better} (run {winner}) {sign} {first} of ")


def test_a_holder_whose_run_has_no_such_metric_is_kept_and_the_reason_says_how_to_move_it(client):
    other, (by_hand,) = sweep(client, {"val_loss": 0.1})  # registered by a run that never logged val_accuracy
    client.set_registered_model_alias(MODEL, ALIAS, version_of(client, by_hand))
    parent, (best,) = sweep(client, {"val_accuracy": 0.99})
    crown(client.tracking_uri, parent, ACCURACY)
    assert holder(client) == version_of(client, by_hand)
    reason = tags(client, parent)[TAG_REASON]
    assert reason.startswith(f"kept v{version_of(client, by_hand)}: its run ({by_hand}) has no val_accuracy")
    assert f"set_registered_model_alias('{MODEL}', 'champion', '{version_of(client, best)}')" in reason


def test_a_holder_chosen_by_another_objective_is_compared_on_this_one_and_the_reason_says_so(client):
    first, (old,) = sweep(client, {"val_loss": 0.3, "val_accuracy": 0.9})
    crown(client.tracking_uri, first, Goal(MODEL, ("val_loss",), ("minimize",)))
    parent, (new,) = sweep(client, {"val_loss": 0.4, "val_accuracy": 0.95})
    crown(client.tracking_uri, parent, ACCURACY)
    assert holder(client) == version_of(client, new)
    assert (
        f"of v{version_of(client, old)} (run {old}) (v{version_of(client, old)} took the alias on val_loss)"
        in (tags(client, parent)[TAG_REASON])
    )


def test_a_multi_objective_search_picks_no_champion_and_says_why(client):
    parent, _ = sweep(client, {"val_accuracy": 0.9, "examples_per_sec": 100.0})
    crown(client.tracking_uri, parent, Goal(MODEL, ("val_accuracy", "examples_per_sec"), ("maximize", "maximize")))
    assert holder(client) is None
    said = tags(client, parent)
    assert said[TAG_CHAMPION] == "none"
    assert said[TAG_REASON].startswith("not chosen: a search of 2 objectives (val_accuracy, examples_per_sec)")


def test_a_sweep_whose_trials_registered_nothing_moves_nothing(client):
    first, (champion,) = sweep(client, {"val_accuracy": 0.5})
    crown(client.tracking_uri, first, ACCURACY)
    parent, _ = sweep(client, {"val_accuracy": 0.99, "register": False}, {"val_accuracy": 0.98, "status": "FAILED"})
    crown(client.tracking_uri, parent, ACCURACY)
    assert holder(client) == version_of(client, champion)
    assert tags(client, parent)[TAG_REASON] == (
        "not chosen: no trial that finished (not pruned) with val_accuracy registered a version of digits; "
        f"the alias stays on v{version_of(client, champion)}"
    )


def _config(tmp_path, uri: str, register_model: str = "", **sweeper):
    return OmegaConf.create(
        {
            "tf_logs": False,
            "objective": "val_accuracy",
            "tracking": {"enabled": True, "uri": uri, "experiment": "launcher", "register_model": register_model},
            "hydra": {
                "launcher": {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"},
                "sweep": {"dir": str(tmp_path / "sweep")},
                "sweeper": {"params": None, **sweeper},
                "overrides": {"task": ["optimizer.learning_rate=0.01,0.1"]},
            },
        }
    )


def test_the_goal_is_the_searchs_objectives_and_directions_or_the_configs_objective(tmp_path):
    assert goal_of(_config(tmp_path, "x")) is None  # no tracking.register_model: nothing to choose
    assert goal_of(_config(tmp_path, "x", MODEL)) == ACCURACY  # a plain multirun: the config's objective
    searched = goal_of(_config(tmp_path, "x", MODEL, objectives=["val_loss"], direction="maximize"))
    assert searched == Goal(MODEL, ("val_loss",), ("maximize",))
    two = goal_of(_config(tmp_path, "x", MODEL, objectives=["val_loss", "val_accuracy"], direction=None))
    assert two == Goal(MODEL, ("val_loss", "val_accuracy"), ("minimize", "maximize"))


def _run_sweep(tmp_path, monkeypatch, client, register_model: str):
    """The callback's start (the parent run), two trials, the callback's end (champion, then the summary)."""
    monkeypatch.setattr(callback.forkserver, "share", lambda: None)  # no jobs start here
    config = _config(tmp_path, client.tracking_uri, register_model)
    callback.SweepCallback().on_multirun_start(config)
    parent = read_json(tmp_path / "sweep" / SWEEP_FILE)["parent_run_id"]
    runs = [trial(client, parent, val_accuracy=value) for value in (0.7, 0.8)]
    callback.SweepCallback().on_multirun_end(config)
    return parent, runs


def test_a_sweep_without_register_model_leaves_the_registry_and_its_parent_alone(tmp_path, monkeypatch, client):
    parent, runs = _run_sweep(tmp_path, monkeypatch, client, "")
    assert holder(client) is None  # its trials registered versions (as a run with the setting would): no alias
    assert not [k for k in tags(client, parent) if k.startswith("registry.")]


def test_the_sweeps_end_crowns_its_best_and_a_failing_registry_loses_none_of_its_results(
    tmp_path, monkeypatch, client, capsys
):
    from mlflow.tracking import MlflowClient

    def refused(*args, **kwargs):
        raise RuntimeError("the registry is read-only")

    monkeypatch.setattr(MlflowClient, "set_registered_model_alias", refused)
    parent, runs = _run_sweep(tmp_path, monkeypatch, client, MODEL)
    done = client.get_run(parent)
    assert done.info.status == "FINISHED" and done.data.tags["sweep.best_run_id"] == runs[1]  # the summary stands
    assert done.data.tags[TAG_REASON] == "failed: RuntimeError: the registry is read-only"
    assert holder(client) is None
    assert "WARNING: no champion chosen for digits (RuntimeError: the registry is read-only)" in capsys.readouterr().err

    monkeypatch.undo()
    again = tmp_path / "again"
    parent, runs = _run_sweep(again, monkeypatch, client, MODEL)
    assert holder(client) == version_of(client, runs[1])
    assert tags(client, parent)[TAG_CHAMPION] == f"{MODEL} v{version_of(client, runs[1])}"
    assert f"Registry: {MODEL}@{ALIAS} -> v{version_of(client, runs[1])}: " in capsys.readouterr().out
