"""The search's pure parts: the space (parsed, checked, sampled), the sampler/pruner specs, the trial's reports and
pruning stop, the job result the sweeper reads, and the parent run's pruning and search records."""

from __future__ import annotations

import math

import optuna
import pytest

from launcher.config.samplers import STUDY_OBJECTIVES, STUDY_PRUNER, make_pruner, make_sampler, spec_problems
from launcher.config.schema import SweepConfig
from launcher.contract import Position
from launcher.launch.hooks.pruning import PruningHook
from launcher.launch.trial import Trial, open_trial
from launcher.outcome import OutcomeRecord
from launcher.sweep.job import DONE, FAILED, PRUNED, STOPPED, JobResult
from launcher.sweep.space import (
    CATEGORICAL,
    FLOAT,
    INT,
    Dimension,
    KeyFacts,
    flatten,
    grid_space,
    in_condition_order,
    override_of,
    parse_dimension,
    parse_space,
    space_problems,
    suggest,
)
from launcher.sweep.summary import best_run, pruning_record, search_record

optuna.logging.set_verbosity(optuna.logging.WARNING)


# ------------------------------------------------------------------ the space


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"low": 1e-4, "high": 10, "log": True}, Dimension("k", FLOAT, low=1e-4, high=10.0, log=True)),
        ({"low": 2, "high": 8, "step": 2}, Dimension("k", INT, low=2, high=8, step=2)),
        ({"low": 0, "high": 1, "type": "float"}, Dimension("k", FLOAT, low=0.0, high=1.0)),
        ({"choices": [[64], [128, 64]]}, Dimension("k", CATEGORICAL, choices=("[64]", "[128,64]"))),
        (["adam", "sgd"], Dimension("k", CATEGORICAL, choices=("adam", "sgd"))),
        ({"choices": [True, None, 0.5]}, Dimension("k", CATEGORICAL, choices=("true", "null", "0.5"))),
        ("choice(a,b)", Dimension("k", CATEGORICAL, choices=("a", "b"))),
        ("range(1,9,2)", Dimension("k", INT, low=1, high=7, step=2)),
        ("interval(0.1,1)", Dimension("k", FLOAT, low=0.1, high=1.0)),
        ("tag(log, interval(1e-4, 1))", Dimension("k", FLOAT, low=1e-4, high=1.0, log=True)),
    ],
)
def test_every_way_of_writing_a_dimension_parses_to_what_it_says(spec, expected):
    assert parse_dimension("k", spec) == expected


def test_a_condition_keeps_its_values_as_override_text():
    dim = parse_dimension(
        "optimizer.momentum", {"low": 0.0, "high": 0.9, "when": {"optimizer.name": ["sgd", "rmsprop"]}}
    )
    assert dim.when == {"optimizer.name": ("sgd", "rmsprop")}
    assert dim.active(lambda key: "sgd") and not dim.active(lambda key: "adam")


def test_nested_params_are_flattened_so_the_command_line_can_set_them():
    nested = {"optimizer": {"learning_rate": {"low": 0.1, "high": 1.0}}, "scaling": {"choices": ["global"]}}
    assert flatten(nested) == {"optimizer.learning_rate": {"low": 0.1, "high": 1.0}, "scaling": {"choices": ["global"]}}


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"low": 1}, "both low and high"),
        ({"low": "a", "high": "b"}, "numbers"),
        ({"choices": []}, "non-empty list"),
        ({"low": 0, "high": 1, "lo": 3}, "unknown: ['lo']"),
        ({"low": 0, "high": 1, "type": "str"}, "float or int"),
        (3, "a mapping"),
        ("choice(a,", "Hydra's sweep syntax"),
    ],
)
def test_a_spec_that_cannot_be_read_is_a_violation_naming_the_key(spec, says):
    dimensions, problems = parse_space({"model.dropout": spec})
    assert dimensions == []
    assert (
        len(problems) == 1 and problems[0].key == "hydra.sweeper.params.model.dropout" and says in problems[0].expected
    )


FACTS = {
    "optimizer.learning_rate": KeyFacts(True, 0.001, bound="> 0"),
    "train.epochs": KeyFacts(True, 10, bound=">= 1"),
    "model.hidden_units": KeyFacts(True, [128, 64], bound="each >= 1"),
    "optimizer.name": KeyFacts(True, "adam"),
    "model.dropout": KeyFacts(True, 0.1),
    "precision": KeyFacts(True, "auto", options=("auto", "bf16", "fp32", "mixed")),
}


def facts(key: str) -> KeyFacts:
    return FACTS.get(key, KeyFacts(False))


@pytest.mark.parametrize(
    ("dim", "key", "expected"),
    [
        (
            Dimension("optimizer.learnig_rate", FLOAT, low=0.1, high=1.0),
            "optimizer.learnig_rate",
            "a key of the config",
        ),
        (Dimension("train.epochs", FLOAT, low=1.0, high=3.0), "train.epochs", "an int range"),
        (Dimension("model.hidden_units", INT, low=1, high=3), "model.hidden_units", "holds list values"),
        (Dimension("optimizer.name", FLOAT, low=1.0, high=3.0), "optimizer.name", "holds str values"),
        (Dimension("precision", CATEGORICAL, choices=("fp64",)), "precision", "the config group's options"),
        (Dimension("optimizer.learning_rate", FLOAT, low=1.0, high=0.1), "optimizer.learning_rate", "low <= high"),
        (Dimension("model.dropout", FLOAT, low=0.0, high=0.5, log=True), "model.dropout", "low > 0 on a log scale"),
        (Dimension("optimizer.learning_rate", FLOAT, low=-1.0, high=1.0), "optimizer.learning_rate", "accepts"),
        (Dimension("train.epochs", INT, low=0, high=4), "train.epochs", "accepts: an integer >= 1"),
        (Dimension("train.epochs", INT, low=1, high=4, step=0), "train.epochs", "step > 0"),
    ],
)
def test_a_dimension_that_does_not_fit_its_key_is_refused(dim, key, expected):
    problems = space_problems([dim], facts, list(FACTS))
    assert [p.key for p in problems] == [f"hydra.sweeper.params.{key}"]
    assert expected in problems[0].expected


def test_an_unknown_key_is_refused_with_the_closest_known_ones():
    problems = space_problems([Dimension("optimizer.learnig_rate", FLOAT, low=0.1, high=1.0)], facts, list(FACTS))
    assert "optimizer.learning_rate" in problems[0].fix


def test_dimensions_that_fit_pass_and_every_misfit_is_reported_at_once():
    good = [
        Dimension("optimizer.learning_rate", FLOAT, low=1e-4, high=10.0, log=True),
        Dimension("train.epochs", INT, low=1, high=4),
        Dimension("model.hidden_units", CATEGORICAL, choices=("[64]", "[128,64]")),
        Dimension("precision", CATEGORICAL, choices=("fp32", "bf16")),
    ]
    assert space_problems(good, facts, list(FACTS)) == []
    bad = [Dimension("nope", FLOAT, low=0.0, high=1.0), Dimension("train.epochs", FLOAT, low=1.0, high=2.0)]
    assert len(space_problems(bad, facts, list(FACTS))) == 2


def test_a_condition_on_a_key_that_is_nowhere_is_refused():
    dim = Dimension("optimizer.learning_rate", FLOAT, low=0.1, high=1.0, when={"optimizer.nmae": ("sgd",)})
    assert [p.key for p in space_problems([dim], facts, list(FACTS))] == [
        "hydra.sweeper.params.optimizer.learning_rate.when"
    ]


def test_a_trial_samples_only_the_dimensions_whose_condition_holds():
    space = [
        Dimension("optimizer.name", CATEGORICAL, choices=("adam", "sgd")),
        Dimension("optimizer.momentum", FLOAT, low=0.0, high=0.9, when={"optimizer.name": ("sgd",)}),
        Dimension("optimizer.learning_rate", FLOAT, low=1e-4, high=1.0, log=True),
        Dimension("train.epochs", INT, low=2, high=8, step=2),
    ]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = set()
    for _ in range(30):
        trial = study.ask()
        chosen = suggest(trial, space, lambda key: None)
        seen.add(chosen["optimizer.name"])
        assert ("optimizer.momentum" in chosen) == (chosen["optimizer.name"] == "sgd")
        assert 1e-4 <= float(chosen["optimizer.learning_rate"]) <= 1.0
        assert int(chosen["train.epochs"]) in (2, 4, 6, 8)
        study.tell(trial, 0.0)
    assert seen == {"adam", "sgd"}


def test_a_conditional_key_is_sampled_after_the_key_its_condition_reads():
    momentum = Dimension("optimizer.momentum", FLOAT, low=0.0, high=0.9, when={"optimizer.name": ("sgd",)})
    name = Dimension("optimizer.name", CATEGORICAL, choices=("adam", "sgd"))
    rate = Dimension("optimizer.learning_rate", FLOAT, low=0.1, high=1.0)
    assert [d.key for d in in_condition_order([momentum, rate, name])] == [
        "optimizer.learning_rate",
        "optimizer.name",
        "optimizer.momentum",
    ]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    chosen = [
        suggest(study.ask(), in_condition_order([momentum, name]), {"optimizer.name": "adam"}.get) for _ in range(8)
    ]
    assert any("optimizer.momentum" in c for c in chosen)  # read from the trial's sgd, not the config's adam
    assert all(("optimizer.momentum" in c) == (c["optimizer.name"] == "sgd") for c in chosen)


def test_a_condition_on_a_key_not_searched_reads_the_config():
    space = [Dimension("optimizer.momentum", FLOAT, low=0.0, high=0.9, when={"optimizer.name": ("sgd",)})]
    trial = optuna.create_study().ask()
    assert suggest(trial, space, {"optimizer.name": "adam"}.get) == {}
    assert "optimizer.momentum" in suggest(optuna.create_study().ask(), space, {"optimizer.name": "sgd"}.get)


def test_a_stored_trial_gives_back_the_same_overrides_it_ran_with():
    """A killed sweep's trial is resumed from its stored params: the overrides must match the first run's
    exactly, or the job would not find its own dir (checkpoints, child run)."""
    space = [
        Dimension("optimizer.learning_rate", FLOAT, low=1e-4, high=1.0, log=True),
        Dimension("model.hidden_units", CATEGORICAL, choices=("[64]", "[128,64]")),
        Dimension("train.epochs", INT, low=1, high=9),
    ]
    study = optuna.create_study(storage="sqlite:///:memory:", sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask()
    first = [override_of(k, v) for k, v in suggest(trial, space, lambda key: None).items()]
    stored = study.get_trials(deepcopy=False)[0]
    assert [override_of(k, v) for k, v in stored.params.items()] == first


def test_a_grid_is_made_of_choices_and_stepped_ranges_only():
    space, problems = grid_space(
        [
            Dimension("train.epochs", INT, low=2, high=6, step=2),
            Dimension("model.dropout", FLOAT, low=0.0, high=0.5, step=0.25),
            Dimension("scaling", CATEGORICAL, choices=("global", "per_replica")),
            Dimension("optimizer.learning_rate", FLOAT, low=0.1, high=1.0),
        ]
    )
    assert space == {
        "train.epochs": ["2", "4", "6"],
        "model.dropout": ["0.0", "0.25", "0.5"],
        "scaling": ["global", "per_replica"],
    }
    assert [p.key for p in problems] == ["hydra.sweeper.params.optimizer.learning_rate"]


# ------------------------------------------------------------------ samplers and pruners


@pytest.mark.parametrize("kind", ["sampler", "pruner"])
def test_a_sampler_or_pruner_spec_is_checked_against_optunas_signature(kind):
    assert (
        spec_problems(
            kind,
            {"name": "random" if kind == "sampler" else "median", "seed" if kind == "sampler" else "n_warmup_steps": 1},
            "k",
        )
        == []
    )
    unknown = spec_problems(kind, {"name": "tpe" if kind == "sampler" else "median", "warmup": 1}, "k")
    assert [p.key for p in unknown] == ["k.warmup"] and "warmup" in unknown[0].fix
    assert [p.key for p in spec_problems(kind, {"name": "nope"}, "k")] == ["k.name"]


def test_the_grid_sampler_takes_its_space_from_the_search_not_from_the_spec():
    assert [p.key for p in spec_problems("sampler", {"name": "grid", "search_space": {}}, "k")] == ["k.search_space"]
    sampler = make_sampler({"name": "grid", "seed": 1}, 1, {"scaling": ["global", "per_replica"]})
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: float(t.suggest_categorical("scaling", ["global", "per_replica"]) == "global"), n_trials=2)
    assert sorted(t.params["scaling"] for t in study.trials) == ["global", "per_replica"]


@pytest.mark.parametrize("name", ["tpe", "random", "cmaes", "qmc", "nsga2"])
def test_every_sampler_in_the_table_is_built_seeded(name):
    sampler = make_sampler({"name": name}, 7)
    assert type(sampler).__name__.lower().startswith(name[:3])


# ------------------------------------------------------------------ a trial in its training process


def _study_with_pruner(tmp_path, pruner: dict, objectives=("val_accuracy",)):
    tmp_path.mkdir(parents=True, exist_ok=True)
    storage = f"sqlite:///{tmp_path}/study.db"
    study = optuna.create_study(study_name="s", storage=storage, directions=["maximize"] * len(objectives))
    study.set_user_attr(STUDY_PRUNER, pruner)
    study.set_user_attr(STUDY_OBJECTIVES, list(objectives))
    return study, storage


class FakeModel:
    stop_training = False


class FakeCallbacks:
    def __init__(self):
        self.model = FakeModel()


def test_a_trial_reports_each_epoch_and_is_stopped_where_its_pruner_says(tmp_path):
    study, storage = _study_with_pruner(tmp_path, {"name": "median", "n_startup_trials": 1, "n_warmup_steps": 0})
    for value in (0.9, 0.95):  # finished trials the pruner compares with
        done = study.ask()
        for epoch in (1, 2, 3):
            done.report(value, epoch)
        study.tell(done, value)
    number = study.ask().number
    trial, plan = open_trial(SweepConfig(trial=number, study=storage, study_name="s"), None, False)
    assert trial.pruning and trial.objective == "val_accuracy"
    assert "median pruner (n_startup_trials=1, n_warmup_steps=0)" in plan.reports
    hook = PruningHook(trial, by_global_step=False)
    callbacks = FakeCallbacks()
    hook.on_train_begin(Position(), callbacks)
    hook.on_epoch_end(Position(1, 0, 23), {"val_accuracy": 0.1})
    assert callbacks.model.stop_training and hook.pruned_at[0].epoch == 1
    stored = study.get_trials(deepcopy=False)[-1]
    assert stored.intermediate_values == {1: 0.1}


def test_a_promising_trial_is_never_stopped_and_reports_every_epoch(tmp_path):
    study, storage = _study_with_pruner(tmp_path, {"name": "median", "n_startup_trials": 1})
    done = study.ask()
    done.report(0.5, 1)
    study.tell(done, 0.5)
    number = study.ask().number
    trial, _ = open_trial(SweepConfig(trial=number, study=storage, study_name="s"), None, False)
    hook = PruningHook(trial, by_global_step=False)
    callbacks = FakeCallbacks()
    hook.on_train_begin(Position(), callbacks)
    for epoch in (1, 2):
        hook.on_epoch_end(Position(epoch, 0, 23 * epoch), {"val_accuracy": 0.9})
    assert not callbacks.model.stop_training and hook.pruned_at is None
    assert study.get_trials(deepcopy=False)[-1].intermediate_values == {1: 0.9, 2: 0.9}


def test_with_val_every_steps_a_trial_reports_by_global_step(tmp_path):
    study, storage = _study_with_pruner(tmp_path, {"name": "none"})
    number = study.ask().number
    trial, plan = open_trial(SweepConfig(trial=number, study=storage, study_name="s"), 10, False)
    assert not trial.pruning and "every 10 global steps" in plan.reports and "no pruner" in plan.reports
    hook = PruningHook(trial, by_global_step=True)
    hook.on_train_begin(Position(), FakeCallbacks())
    hook.on_validation(Position(0, 10, 10), {"val_accuracy": 0.3})
    hook.on_epoch_end(Position(1, 0, 23), {"val_accuracy": 0.4})
    assert study.get_trials(deepcopy=False)[-1].intermediate_values == {10: 0.3, 23: 0.4}


def test_a_multi_worker_or_multi_objective_trial_is_never_pruned(tmp_path):
    study, storage = _study_with_pruner(tmp_path, {"name": "median"})
    number = study.ask().number
    trial, plan = open_trial(SweepConfig(trial=number, study=storage, study_name="s"), None, True)
    assert not trial.pruning and "never pruned" in plan.reports
    two, storage2 = _study_with_pruner(tmp_path / "b", {"name": "none"}, ("val_accuracy", "examples_per_sec"))
    trial, plan = open_trial(SweepConfig(trial=two.ask().number, study=storage2, study_name="s"), None, False)
    assert trial.objective is None and "2 objectives" in plan.reports


def test_a_run_that_is_no_trial_opens_nothing_and_a_missing_trial_is_refused(tmp_path):
    from launcher.config.errors import ConfigError

    assert open_trial(SweepConfig(), None, False) is None
    _, storage = _study_with_pruner(tmp_path, {"name": "none"})
    with pytest.raises(ConfigError) as refused:
        open_trial(SweepConfig(trial=5, study=storage, study_name="s"), None, False)
    assert refused.value.violations[0].key == "sweep.trial"


@pytest.mark.parametrize("name", ["none", "median", "percentile", "successive_halving", "hyperband", "threshold"])
def test_every_pruner_in_the_table_is_built_from_its_spec(name):
    arguments = {"percentile": {"percentile": 25.0}, "threshold": {"lower": 0.2}}.get(name, {})
    pruner = make_pruner({"name": name, **arguments})
    assert type(pruner).__name__.lower().replace("nop", "none").startswith(name.split("_")[0][:4])


def test_a_pruner_spec_passes_its_arguments_to_optunas_class():
    pruner = make_pruner({"name": "percentile", "percentile": 25.0, "n_warmup_steps": 2})
    assert type(pruner).__name__ == "PercentilePruner" and pruner._percentile == 25.0


def test_trial_handles_report_through_optuna(tmp_path):
    study, _ = _study_with_pruner(tmp_path, {"name": "none"})
    handle = study.ask()
    Trial(handle.number, "val_accuracy", False, handle).report(0.5, 1)
    assert study.get_trials(deepcopy=False)[0].intermediate_values == {1: 0.5}


# ------------------------------------------------------------------ what the sweeper and the parent read


def test_a_job_result_says_how_the_job_ended():
    finished = OutcomeRecord(status="FINISHED", exit_code=0, metrics={"val_accuracy": 0.9}, stop_reason="epochs")
    pruned = OutcomeRecord(status="FINISHED", exit_code=0, metrics={"val_accuracy": 0.2}, stop_reason="pruned")
    killed = OutcomeRecord(status="KILLED", exit_code=143)
    refused = OutcomeRecord(status="REFUSED", exit_code=2)
    assert JobResult.of(finished, "d").status == DONE and JobResult.of(finished, "d").value("val_accuracy") == 0.9
    assert JobResult.of(pruned, "d").status == PRUNED
    assert JobResult.of(killed, "d").status == STOPPED
    assert JobResult.of(refused, "d").status == FAILED and math.isnan(JobResult.of(refused, "d").value("val_accuracy"))
    assert JobResult.of(None, "d").status == FAILED


class FakeRun:
    def __init__(self, name, status, metrics, tags=None):
        self.info = type("Info", (), {"run_name": name, "status": status, "run_id": name})()
        self.data = type("Data", (), {"metrics": metrics, "tags": tags or {}, "params": {}})()


def test_a_pruned_trial_is_never_the_best_and_its_saved_steps_are_counted():
    runs = [
        FakeRun("a", "FINISHED", {"val_accuracy": 0.9}),
        FakeRun(
            "b", "FINISHED", {"val_accuracy": 0.95}, {"pruned": "true", "pruned.epoch": "1", "pruned.steps_saved": "69"}
        ),
        FakeRun(
            "c", "FINISHED", {"val_accuracy": 0.2}, {"pruned": "true", "pruned.epoch": "2", "pruned.steps_saved": "46"}
        ),
    ]
    assert best_run(runs, "val_accuracy").info.run_name == "a"
    metrics, tags = pruning_record(runs)
    assert metrics == {"sweep.pruned_trials": 2.0, "sweep.steps_saved": 115.0}
    assert tags["sweep.pruned"] == "b (epoch 1), c (epoch 2)"


def test_the_parent_shows_importances_and_a_pareto_front():
    report = {
        "objectives": ["val_accuracy", "examples_per_sec"],
        "states": {"complete": 2, "pruned": 0},
        "importances": {
            "val_accuracy": {"optimizer.learning_rate": 0.8},
            "examples_per_sec": {"model.hidden_units": 1.0},
        },
        "best": [
            {"number": 0, "values": [0.9, 1000.0], "params": {}},
            {"number": 1, "values": [0.8, 2000.0], "params": {}},
        ],
    }
    metrics, tags = search_record(report)
    assert metrics == {
        "importance.val_accuracy.optimizer.learning_rate": 0.8,
        "importance.examples_per_sec.model.hidden_units": 1.0,
    }
    assert (
        tags["sweep.pareto_front"]
        == "trial 0: val_accuracy=0.9, examples_per_sec=1000; trial 1: val_accuracy=0.8, examples_per_sec=2000"
    )
    assert tags["sweep.trial_states"] == "complete 2"
    single, _ = search_record({"objectives": ["val_loss"], "importances": {"val_loss": {"scaling": 1.0}}})
    assert single == {"importance.scaling": 1.0}


# ------------------------------------------------------------------ the sweeper's loop, with a fake Hydra launcher


class FakeLauncher:
    """Runs no process: each job "trains" by the rule given, reporting to its trial as a real one would."""

    def __init__(self, rule):
        self.rule = rule  # (trial number, overrides) -> JobResult
        self.launched: list[tuple[int, list[str]]] = []

    def launch(self, jobs, initial_job_idx):
        from hydra.core.utils import JobReturn, JobStatus

        returns = []
        for idx, overrides in enumerate(jobs):
            number = int(next(o for o in overrides if o.startswith("sweep.trial=")).split("=")[1])
            assert number == initial_job_idx + idx  # a trial's job number is its trial number
            self.launched.append((number, list(overrides)))
            job = JobReturn()
            job.status = JobStatus.COMPLETED
            job.return_value = self.rule(number, list(overrides))
            returns.append(job)
        return returns


def _search(tmp_path, *overrides, **settings):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from support.config import CONF_DIR

    from launcher.config.schema import register_configs
    from launcher.sweep.search import Search

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        config = hydra_compose(
            config_name="config",
            overrides=[f"hydra.sweep.dir={tmp_path}", *overrides],
            return_hydra_config=True,
        )
        loader = GlobalHydra.instance().config_loader()
    search = Search(**settings)
    search.node = config
    search.hydra_context = type("Context", (), {"config_loader": loader})()
    return search


def _values(overrides, key):
    return next(o.split("=", 1)[1] for o in overrides if o.startswith(f"{key}="))


@pytest.mark.slow  # a search's trials, seconds of CPU in this process
def test_the_sweeper_runs_n_trials_in_batches_and_tells_the_study_how_each_ended(tmp_path):
    space = {"optimizer.learning_rate": {"low": 1e-3, "high": 10.0, "log": True}}
    search = _search(tmp_path, n_trials=6, n_jobs=2, params=space, sampler={"name": "random", "seed": 0})

    def rule(number, overrides):
        rate = float(_values(overrides, "optimizer.learning_rate"))
        if number == 1:
            return JobResult(FAILED)
        if rate > 1:
            return JobResult(PRUNED, {"val_accuracy": 0.1})
        return JobResult(DONE, {"val_accuracy": 1 / (1 + rate)})

    search.launcher = FakeLauncher(rule)
    search.sweep(["train.epochs=3"])
    study = optuna.load_study(study_name="launcher", storage=f"sqlite:///{tmp_path}/optuna.db")
    states = {t.number: t.state.name for t in study.trials}
    assert len(states) == 6 and states[1] == "FAIL"
    for trial in study.trials:
        if trial.number != 1:
            expected = "PRUNED" if trial.params["optimizer.learning_rate"] > 1 else "COMPLETE"
            assert trial.state.name == expected
    assert [n for n, _ in search.launcher.launched] == list(range(6))
    assert all("train.epochs=3" in o for _, o in search.launcher.launched)  # the fixed overrides reach every job
    assert (tmp_path / "summary" / "search" / "search.json").exists()

    # Run again: the study has its 6, nothing is asked; more trials asked only up to a raised n_trials.
    again = _search(tmp_path, n_trials=6, n_jobs=2, params=space, sampler={"name": "random", "seed": 0})
    again.launcher = FakeLauncher(rule)
    again.sweep(["train.epochs=3"])
    assert again.launcher.launched == []
    more = _search(tmp_path, n_trials=8, n_jobs=2, params=space, sampler={"name": "random", "seed": 0})
    more.launcher = FakeLauncher(rule)
    more.sweep(["train.epochs=3"])
    assert [n for n, _ in more.launcher.launched] == [6, 7]
    rates = [
        t.params["optimizer.learning_rate"]
        for t in optuna.load_study(study_name="launcher", storage=f"sqlite:///{tmp_path}/optuna.db").trials
    ]
    assert len(set(rates)) == 8  # the reseeded sampler did not propose its first points again


@pytest.mark.slow  # a search's trials, seconds of CPU in this process
def test_a_trial_left_running_is_launched_again_with_its_values_and_a_stopped_one_stays_running(tmp_path):
    space = {"model.hidden_units": {"choices": [[16], [32], [64]]}, "train.epochs": {"low": 1, "high": 9}}
    storage = f"sqlite:///{tmp_path}/optuna.db"
    first = _search(tmp_path, n_trials=4, n_jobs=1, params=space, sampler={"name": "random", "seed": 0})
    first.launcher = FakeLauncher(lambda n, o: JobResult(STOPPED if n == 1 else DONE, {"val_accuracy": 0.5}))
    first.sweep([])
    study = optuna.load_study(study_name="launcher", storage=storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "RUNNING", "COMPLETE", "COMPLETE"]
    left = [o for n, o in first.launcher.launched if n == 1][0]

    again = _search(tmp_path, n_trials=4, n_jobs=1, params=space, sampler={"name": "random", "seed": 0})
    again.launcher = FakeLauncher(lambda n, o: JobResult(DONE, {"val_accuracy": 0.7}))
    again.sweep([])
    assert again.launcher.launched == [(1, left)]  # the same overrides: the same job dir, checkpoints, run
    assert [t.state.name for t in optuna.load_study(study_name="launcher", storage=storage).trials] == ["COMPLETE"] * 4


def test_a_grid_search_stops_at_the_grids_size_and_visits_each_point_once(tmp_path):
    space = {"scaling": {"choices": ["global", "per_replica"]}, "train.epochs": {"low": 1, "high": 3}}
    search = _search(tmp_path, n_trials=20, n_jobs=2, params=space, sampler={"name": "grid", "seed": 0})
    search.launcher = FakeLauncher(lambda n, o: JobResult(DONE, {"val_accuracy": 0.5}))
    search.sweep([])
    seen = sorted((_values(o, "scaling"), _values(o, "train.epochs")) for _, o in search.launcher.launched)
    assert seen == [(s, e) for s in ("global", "per_replica") for e in ("1", "2", "3")]


def test_a_fail_fast_stop_ends_the_search_before_its_next_batch(tmp_path):
    from launcher.files import STOP_FILE, write_json_atomic

    space = {"optimizer.learning_rate": {"low": 1e-3, "high": 1.0}}

    def rule(number, overrides):
        if number == 2:  # what sweep.job does when a job fails under sweep.fail_fast=true
            write_json_atomic(tmp_path / STOP_FILE, {"job": "x", "exit_code": 1, "log": "x"})
            return JobResult(FAILED)
        return JobResult(DONE, {"val_accuracy": 0.5})

    search = _search(tmp_path, n_trials=10, n_jobs=2, params=space)
    search.launcher = FakeLauncher(rule)
    search.sweep([])
    assert [n for n, _ in search.launcher.launched] == [0, 1, 2, 3]


def test_a_fixed_value_on_the_command_line_takes_its_key_out_of_the_space_and_sweep_syntax_adds_one(tmp_path):
    space = {"optimizer.learning_rate": {"low": 1e-3, "high": 1.0}}
    search = _search(tmp_path, params=space)
    fixed, dimensions, problems = search.plan(["optimizer.learning_rate=0.01", "scaling=choice(global,per_replica)"])
    assert problems == [] and fixed == ["optimizer.learning_rate=0.01"]
    assert [(d.key, d.choices) for d in dimensions] == [("scaling", ("global", "per_replica"))]
    _, _, nothing = search.plan(["optimizer.learning_rate=0.01"])
    assert [p.key for p in nothing] == ["hydra.sweeper.params"]


def test_no_new_trial_starts_once_the_timeout_has_passed(tmp_path, monkeypatch):
    from launcher.sweep import search as search_module

    clock = [0.0]
    monkeypatch.setattr(search_module.time, "monotonic", lambda: clock[0])

    def rule(number, overrides):
        clock[0] += 40.0  # each trial takes 40 s on this clock
        return JobResult(DONE, {"val_accuracy": 0.5})

    space = {"optimizer.learning_rate": {"low": 1e-3, "high": 1.0}}
    search = _search(tmp_path, n_trials=10, n_jobs=1, timeout=100, params=space)
    search.launcher = FakeLauncher(rule)
    search.sweep([])
    assert [n for n, _ in search.launcher.launched] == [0, 1, 2]  # started at 0, 40 and 80 s; not at 120


def test_a_pruner_on_a_search_whose_trials_report_once_is_refused(tmp_path):
    space = {"optimizer.learning_rate": {"low": 1e-3, "high": 1.0}}
    search = _search(tmp_path, "train.epochs=1", params=space, pruner={"name": "median"})
    _, _, problems = search.plan([])
    assert [p.key for p in problems] == ["hydra.sweeper.pruner.name"] and "reports once" in problems[0].expected
    both = {**space, "train.epochs": {"low": 1, "high": 5}}
    searched = _search(tmp_path, "train.epochs=1", params=both, pruner={"name": "median"})
    assert searched.plan([])[2] == []  # epochs searched: most trials report more than once
    every = _search(tmp_path, "train.epochs=1", "train.val_every_steps=5", params=space, pruner={"name": "median"})
    assert every.plan([])[2] == []


def test_the_default_search_space_varies_single_keys_not_groups_that_set_several():
    """Issue 62, item 5: the default space's `scaling: {choices: [per_replica, global]}` ("batch rule") also set
    batch_size 64 or 128: it swept the batch size under another name."""
    import yaml
    from support.config import CONF_DIR

    space = yaml.safe_load((CONF_DIR / "hparams_search" / "optuna.yaml").read_text())["hydra"]["sweeper"]["params"]
    groups = {p.name for p in CONF_DIR.iterdir() if p.is_dir()}
    assert not set(space) & groups, space
    assert "scaling.batch_size" in space
