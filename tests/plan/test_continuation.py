"""A continued run keeps what it started with (issue 62, items 2 and 3): `auto`'s first choices are read back, a
changed setting is applied and recorded or refused with a fix."""

from __future__ import annotations

from launcher.plan.continuation import CHANGEABLE, changeable, changed_tags, continue_run

BEFORE = {
    "precision": {"name": "auto"},
    "xla": "auto",
    "optimizer": {"learning_rate": 0.001, "update": "auto"},
    "train": {"epochs": 5, "steps_per_execution": 16},
    "tune": "off",
    "tracking": {"tags": {}},
}
DECISIONS = {
    "precision": {"value": "bf16", "reason": "auto: ..."},
    "xla": {"value": True, "reason": "auto: ..."},
    "optimizer.update": {"value": "fused", "reason": "auto: ..."},
    "steps_per_execution": {"value": 64, "reason": "tune=auto"},
}


def _now(**changes):
    now = {k: dict(v) if isinstance(v, dict) else v for k, v in BEFORE.items()}
    for dotted, value in changes.items():
        section, _, key = dotted.partition("__")
        if key:
            now[section] = {**now[section], key: value}
        else:
            now[section] = value
    return now


def test_autos_first_choices_are_kept_and_nothing_is_timed_again():
    kept = continue_run(BEFORE, _now(), DECISIONS, "exp1")
    assert kept.pins == {"precision.name": "bf16", "xla": True, "optimizer.update": "fused"}
    assert (kept.changed, kept.refused) == ((), ())
    assert kept.describe_pins() == "precision.name=bf16, xla=true, optimizer.update=fused"
    tuned = continue_run({**BEFORE, "tune": "auto"}, _now(tune="auto"), DECISIONS, "exp1")
    assert tuned.pins["train.steps_per_execution"] == 64 and tuned.pins["tune"] == "off"
    # A setting the person fixed is theirs: nothing pinned.
    fixed = continue_run(_now(xla="false"), _now(xla="false"), DECISIONS, "exp1")
    assert "xla" not in fixed.pins


def test_a_changed_setting_is_applied_and_recorded_when_the_table_allows_it():
    more = continue_run(BEFORE, _now(train__epochs=8), DECISIONS, "exp1")
    assert more.changed == (("train.epochs", 5, 8),) and more.refused == ()
    assert changed_tags(more.describe_changes()) == {"changed.train.epochs": "5 -> 8"}


def test_a_setting_that_changes_what_is_learned_is_refused_with_the_value_it_started_with_and_a_new_run():
    refused = continue_run(BEFORE, _now(train__epochs=8, optimizer__learning_rate=0.01), DECISIONS, "exp1")
    assert refused.changed == (("train.epochs", 5, 8),)
    (violation,) = refused.refused
    assert (violation.key, violation.value) == ("optimizer.learning_rate", 0.01)
    assert "the value this run started with, 0.001" in violation.expected
    assert violation.fix == (
        "optimizer.learning_rate=0.001 to continue it; checkpoint.resume=never to start it over; or a new run from "
        "its weights: name=exp1-2 model.init_from=exp1 optimizer.learning_rate=0.01"
    )


def test_another_model_option_is_one_refusal_by_its_name():
    before = {**BEFORE, "model": {"name": "mlp", "hidden_units": [32]}}
    now = {**BEFORE, "model": {"name": "cnn", "filters": [16]}}
    (violation,) = continue_run(before, now, DECISIONS, "").refused
    assert (violation.key, violation.value) == ("model.name", "cnn")


def test_the_table_names_sections_and_keys_and_nothing_that_changes_a_step():
    assert changeable("tracking.tags.team") and changeable("export.formats") and changeable("train.epochs")
    assert not changeable("train.epochs_extra") and not changeable("optimizer.learning_rate")
    assert not any(key.startswith(("model", "dataset", "task", "optimizer", "precision", "seed")) for key in CHANGEABLE)


def test_a_key_the_launcher_added_or_dropped_between_launches_is_not_a_change():
    before = {k: v for k, v in BEFORE.items() if k != "tune"}  # a config.yaml from before `tune` existed
    now = {**BEFORE, "sweep": {"varies": []}}
    kept = continue_run(before, now, DECISIONS, "exp1")
    assert (kept.changed, kept.refused) == ((), ())
