"""tune=auto: the candidate steps per environment, the cache key, the choice (fastest, a tie keeps the rate rule's,
failed or non-finite candidates skipped with why), multi-worker never tuning, and a real first and second launch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, TINY, config
from fakes import CPU_AMX_MEASURED, CPU_PLAIN, EPYC_AVX512_BF16, ONE_A100, ONE_V100

from launcher.plan.resolve import resolve, resolve_all
from launcher.run import tuning
from launcher.run.tuning import Candidate, Timing


def labels(found):
    return [c.label for c in found]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (CPU_AMX_MEASURED, ["fp32 graph", "fp32 xla", "bf16 graph", "bf16 xla"]),
        (EPYC_AVX512_BF16, ["fp32 graph", "fp32 xla", "bf16 graph", "bf16 xla"]),
        (CPU_PLAIN, ["fp32 graph", "fp32 xla"]),  # no bfloat16 instructions: bf16 is emulated, never faster
        (ONE_A100, ["fp32 graph", "fp32 xla", "bf16 graph", "bf16 xla", "mixed graph", "mixed xla"]),
    ],
)
def test_the_candidates_are_the_steps_auto_allows_on_this_hardware(env, expected):
    found, left_out = tuning.candidates(config("precision=auto", "xla=auto"), env)
    assert labels(found) == expected
    assert ("bf16: this CPU has no bfloat16 instructions" in " ".join(left_out)) == (env is CPU_PLAIN)


def test_a_fixed_precision_or_xla_is_not_tuned_and_a_refused_candidate_is_left_out_with_why():
    assert labels(tuning.candidates(config("precision=fp32", "xla=auto"), EPYC_AVX512_BF16)[0]) == [
        "fp32 graph",
        "fp32 xla",
    ]
    assert labels(tuning.candidates(config("precision=auto", "xla=false"), EPYC_AVX512_BF16)[0]) == [
        "fp32 graph",
        "bf16 graph",
    ]
    found, left_out = tuning.candidates(config("optimizer.name=adafactor"), EPYC_AVX512_BF16)
    assert labels(found) == ["fp32 graph", "bf16 graph"] and "adafactor" in left_out[0]
    # float16 on a V100 without loss scaling is refused by the resolver: not a candidate.
    found, left_out = tuning.candidates(config("loss_scale=none"), ONE_V100)
    assert "mixed graph" not in labels(found) and any(o.startswith("mixed") for o in left_out)


def test_the_cache_key_changes_with_the_batch_or_the_model_and_not_with_a_rerun():
    base = tuning.signature(config(), EPYC_AVX512_BF16)
    assert tuning.signature(config(), EPYC_AVX512_BF16) == base
    assert tuning.signature(config("seed=3", "name=again", "train.epochs=40"), EPYC_AVX512_BF16) == base
    assert tuning.signature(config("scaling.batch_size=128"), EPYC_AVX512_BF16) != base
    assert tuning.signature(config("model.hidden_units=[256,64]"), EPYC_AVX512_BF16) != base


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LAUNCHER_CACHE", str(tmp_path))
    return tmp_path / "step_tuning.json"


def fake_timings(monkeypatch, rates: dict[str, float | None], notes: dict[str, str] | None = None):
    timed = []

    def time_candidate(candidate, overrides, launch_dir, steps=16):
        timed.append(candidate.label)
        rate = rates[candidate.label]
        return Timing(candidate, rate, (notes or {}).get(candidate.label, "") if rate is None else "")

    monkeypatch.setattr(tuning, "time_candidate", time_candidate)
    return timed


def test_the_fastest_candidate_is_chosen_cached_and_the_plan_quotes_the_table(cache, monkeypatch, tmp_path):
    rates = {"fp32 graph": 3000.0, "fp32 xla": 4200.0, "bf16 graph": 5000.0, "bf16 xla": None}
    timed = fake_timings(monkeypatch, rates, {"bf16 xla": "non-finite (loss nan)"})
    cfg = config("tune=auto")
    env, record = tuning.decide(cfg, EPYC_AVX512_BF16, [], tmp_path)
    assert timed == ["fp32 graph", "fp32 xla", "bf16 graph", "bf16 xla"]
    assert (env.tuned.precision, env.tuned.xla) == ("bf16", False)
    assert record.tune == "bf16 graph" and "bf16 xla non-finite (loss nan)" in record.reason("tune")
    plan = resolve(cfg, env)
    assert plan.precision.name == "bf16" and not plan.step.xla
    assert "tune: the fastest step timed here" in plan.precision.reason("name")
    stored = json.loads(cache.read_text())[tuning.signature(cfg, EPYC_AVX512_BF16)]
    assert stored["choice"] == {"precision": "bf16", "xla": False}
    # The next launch with the same signature reads the cache; tune=force times again.
    again = fake_timings(monkeypatch, rates)
    env2, record2 = tuning.decide(cfg, EPYC_AVX512_BF16, [], tmp_path)
    assert again == [] and env2.tuned == env.tuned and record2.reason("tune").startswith("cached")
    tuning.decide(config("tune=force"), EPYC_AVX512_BF16, [], tmp_path)
    assert len(again) == 4


def test_the_doctor_reads_the_cached_table_of_the_config_it_examines(cache, monkeypatch, tmp_path):
    cfg = config("tune=auto")
    assert "not timed on this machine" in tuning.cached_summary(cfg, EPYC_AVX512_BF16)
    fake_timings(monkeypatch, {"fp32 graph": 3000.0, "fp32 xla": 4200.0, "bf16 graph": 5000.0, "bf16 xla": 100.0})
    tuning.decide(cfg, EPYC_AVX512_BF16, [], tmp_path)
    summary = tuning.cached_summary(config("tune=auto", "mode=doctor"), EPYC_AVX512_BF16)
    assert summary.startswith("bf16 graph: timed 0 s ago") and "fp32 xla 4,200 ex/s" in summary


def test_a_tie_within_five_percent_keeps_the_rate_rules_choice(cache, monkeypatch, tmp_path):
    rule = tuning.rule(config(), EPYC_AVX512_BF16)
    assert rule == Candidate("bf16", False)  # what the matmul rates pick on this machine
    fake_timings(monkeypatch, {"fp32 graph": 5000.0, "fp32 xla": 5100.0, "bf16 graph": 4950.0, "bf16 xla": 3000.0})
    env, record = tuning.decide(config("tune=auto"), EPYC_AVX512_BF16, [], tmp_path)
    assert (env.tuned.precision, env.tuned.xla) == ("bf16", False)
    assert "the matmul rates' choice kept" in record.reason("tune")


def test_when_every_candidate_fails_the_rate_rule_decides_and_nothing_is_cached(cache, monkeypatch, tmp_path):
    fake_timings(monkeypatch, dict.fromkeys(["fp32 graph", "fp32 xla", "bf16 graph", "bf16 xla"]))
    env, record = tuning.decide(config("tune=auto"), EPYC_AVX512_BF16, [], tmp_path)
    assert env.tuned is None and record.tune == "not tuned" and not cache.exists()


def test_multi_worker_jobs_never_tune_and_explain_only_says_it_would(cache, monkeypatch, tmp_path):
    timed = fake_timings(monkeypatch, {})
    env, record = tuning.decide(config("tune=auto", "strategy=multi_worker"), EPYC_AVX512_BF16, [], tmp_path)
    assert env.tuned is None and "multi-worker jobs never tune" in record.reason("tune")
    env, record = tuning.decide(config("tune=auto", "explain=true"), EPYC_AVX512_BF16, [], tmp_path)
    assert env.tuned is None and "would time 4 candidate steps" in record.reason("tune") and timed == []
    env, record = tuning.decide(config(), EPYC_AVX512_BF16, [], tmp_path)  # tune=off, the default
    assert env.tuned is None and record is None


def test_an_unknown_tune_value_is_refused_by_the_resolver_with_the_other_problems():
    cfg = config("tune=sometimes", "xla=maybe")
    assert tuning.decide(cfg, EPYC_AVX512_BF16, [], ROOT) == (EPYC_AVX512_BF16, None)  # nothing timed
    _, problems = resolve_all(cfg, EPYC_AVX512_BF16)
    assert {"tune", "xla"} <= {p.key for p in problems}


def test_a_first_launch_times_the_steps_and_a_second_reads_the_cache_and_picks_the_same(tmp_path):
    env = {"LAUNCHER_CACHE": str(tmp_path / "cache")}
    os.makedirs(env["LAUNCHER_CACHE"])  # the suite's fixed matmul rates, in a cache of this test's own
    shutil.copy(os.path.join(os.environ["LAUNCHER_CACHE"], "matmul_rates.json"), env["LAUNCHER_CACHE"])
    # precision fixed: two candidates (fp32 graph, fp32 xla) keep the test short; which two does not matter here.
    run = [sys.executable, "-m", "launcher", "tune=auto", "precision=fp32", "tracking.enabled=false", *TINY]
    first = subprocess.run(
        [*run, f"hydra.run.dir={tmp_path}/one"], cwd=ROOT, capture_output=True, text=True, env={**os.environ, **env}
    )
    assert first.returncode == 0, first.stderr[-2000:]
    decided = yaml.safe_load((tmp_path / "one" / "plan.yaml").read_text())["decisions"]
    assert decided["tune"]["reason"].startswith("timed now in")
    table = json.loads((tmp_path / "cache" / "step_tuning.json").read_text())
    (entry,) = table.values()
    assert [row["step"] for row in entry["table"]] == ["fp32 graph", "fp32 xla"]
    assert all(row["examples_per_sec"] > 0 for row in entry["table"])
    second = subprocess.run(
        [*run, f"hydra.run.dir={tmp_path}/two"], cwd=ROOT, capture_output=True, text=True, env={**os.environ, **env}
    )
    assert second.returncode == 0, second.stderr[-2000:]
    again = yaml.safe_load((tmp_path / "two" / "plan.yaml").read_text())["decisions"]
    assert again["tune"]["reason"].startswith("cached") and again["tune"]["value"] == decided["tune"]["value"]
    assert (again["precision"]["value"], again["xla"]["value"]) == (
        decided["precision"]["value"],
        decided["xla"]["value"],
    )
