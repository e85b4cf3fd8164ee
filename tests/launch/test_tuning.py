"""tune=auto: the candidate steps per environment, the cache key, the choice (fastest, a tie keeps the rate rule's,
failed or non-finite candidates skipped with why), steps per call, multi-worker never tuning, the timing child's
rounds in-process, and a real first and second launch."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import replace

import pytest
import yaml
from fakes import CPU_AMX_MEASURED, CPU_PLAIN, EPYC_AVX512_BF16, ONE_A100, ONE_V100, XEON_AVX512_BF16
from mlflow.tracking import MlflowClient
from support.config import ROOT, TINY, config
from support.tracking import store

from launcher.launch import tuning
from launcher.launch.tuning import Candidate, Timing
from launcher.plan.resolve import resolve, resolve_all


def labels(found):
    return [c.label for c in found]


def STEPS(precision):  # noqa: N802 (reads as the constant list it builds)
    """The two steps of one precision under adam (which has a fused kernel): the graph step with the fused update
    (hybrid, what optimizer.update=auto resolves to) and the whole step compiled (xla, the update fused by XLA)."""
    return [f"{precision} hybrid", f"{precision} xla"]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        # bf16 xla left out: XLA's bfloat16 matmuls are measured no faster than its float32 on these CPUs
        (CPU_AMX_MEASURED, [*STEPS("fp32"), "bf16 hybrid"]),
        (EPYC_AVX512_BF16, [*STEPS("fp32"), "bf16 hybrid"]),
        (XEON_AVX512_BF16, [*STEPS("fp32"), "bf16 hybrid"]),
        (CPU_PLAIN, STEPS("fp32")),  # no bfloat16 instructions: bf16 is emulated, never faster
        (ONE_A100, [*STEPS("fp32"), *STEPS("bf16"), *STEPS("mixed")]),
    ],
)
def test_the_candidates_are_the_steps_auto_allows_on_this_hardware(env, expected):
    found, left_out = tuning.candidates(config("precision=auto", "xla=auto"), env)
    assert labels(found) == expected
    assert ("bf16: this CPU has no bfloat16 instructions" in " ".join(left_out)) == (env is CPU_PLAIN)
    # The other update kind is timed beside the fastest step only; XLA on one replica compiles the update itself.
    variants = tuning.update_variants(config("precision=auto", "xla=auto"), env, found)
    assert {c.label: labels(v) for c, v in variants.items()} == {
        c.label: [c.label.replace("hybrid", "graph")] for c in found if not c.xla
    }


def test_bf16_under_xla_is_timed_only_where_xla_bfloat16_matmuls_may_pay_or_fp32_under_xla_is_not_timed():
    found, left_out = tuning.candidates(config("precision=auto", "xla=auto"), EPYC_AVX512_BF16)
    (why,) = [reason for reason in left_out if reason.startswith("bf16 xla:")]
    assert "XLA's bfloat16 matmuls no faster than its float32 (measured here, 2048^3: 194 vs 193 GFLOP/s)" in why
    faster = replace(EPYC_AVX512_BF16, matmul_gflops={**EPYC_AVX512_BF16.matmul_gflops, "bfloat16_xla": 300.0})
    unmeasured = replace(EPYC_AVX512_BF16, matmul_gflops={})
    for env in (faster, unmeasured):
        assert "bf16 xla" in labels(tuning.candidates(config("precision=auto", "xla=auto"), env)[0])
    # precision=bf16: bf16 xla is timed against bf16's graph steps, not against fp32 under XLA.
    assert labels(tuning.candidates(config("precision=bf16", "xla=auto"), EPYC_AVX512_BF16)[0]) == STEPS("bf16")


def test_a_fixed_precision_or_xla_is_not_tuned_and_a_refused_candidate_is_left_out_with_why():
    assert labels(tuning.candidates(config("precision=fp32", "xla=auto"), EPYC_AVX512_BF16)[0]) == STEPS("fp32")
    no_xla = config("precision=auto", "xla=false")
    found = tuning.candidates(no_xla, EPYC_AVX512_BF16)[0]
    assert labels(found) == ["fp32 hybrid", "bf16 hybrid"]
    assert len(tuning.update_variants(no_xla, EPYC_AVX512_BF16, found)) == 2
    # A fixed update kind is not tuned; an optimizer without a fused kernel has one update kind.
    keras_only = config("precision=fp32", "optimizer.update=keras")
    fixed = tuning.candidates(keras_only, EPYC_AVX512_BF16)[0]
    assert (
        labels(fixed) == ["fp32 graph", "fp32 xla"]
        and tuning.update_variants(keras_only, EPYC_AVX512_BF16, fixed) == {}
    )
    adafactor = config("optimizer.name=adafactor")
    found, left_out = tuning.candidates(adafactor, EPYC_AVX512_BF16)
    assert labels(found) == ["fp32 graph", "bf16 graph"] and "adafactor" in left_out[0]
    assert tuning.update_variants(adafactor, EPYC_AVX512_BF16, found) == {}
    # Under two replicas XLA does not compile the update: the other update kind is a variant of the XLA step too.
    two = config("precision=fp32", "strategy=mirrored")
    mirrored = tuning.candidates(two, EPYC_AVX512_BF16)[0]
    assert labels(mirrored) == ["fp32 hybrid", "fp32 xla+fused"]
    variants = tuning.update_variants(two, EPYC_AVX512_BF16, mirrored)
    assert [labels(v) for v in variants.values()] == [["fp32 graph"], ["fp32 xla"]]
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


def fake_timings(monkeypatch, rates: dict[str, float | None], notes: dict[str, str] | None = None, spreads=None):
    """The timing child replaced by a table: each candidate's rate by label (None: it failed, with `notes`; its
    rounds' spread from `spreads`), and the fastest one's variants (other update kind, longer calls, stock layers)
    when the table has them."""
    timed = []

    def time_candidates(job):
        out = []
        for candidate in job.found:
            timed.append(candidate.label)
            rate = rates[candidate.label]
            note = (notes or {}).get(candidate.label, "") if rate is None else ""
            out.append(Timing(candidate, rate, note, (spreads or {}).get(candidate.label)))
        best = max((t for t in out if t.examples_per_sec), key=lambda t: t.examples_per_sec, default=None)
        for other in job.update_variants.get(best.candidate, []) if best else ():
            if other.label in rates:
                timed.append(other.label)
                out.append(Timing(other, rates[other.label]))
        for n in job.more_steps_per_call if best else ():
            longer = replace(best.candidate, steps_per_execution=n)
            if longer.label in rates:
                timed.append(longer.label)
                out.append(Timing(longer, rates[longer.label], spread=(0.9 * rates[longer.label], rates[longer.label])))
        stock = replace(best.candidate, layer_swaps="off") if best else None
        if stock and stock.label in rates:  # the child times this when the fastest step's build swapped layers
            timed.append(stock.label)
            out.append(Timing(stock, rates[stock.label]))
        return out

    monkeypatch.setattr(tuning, "time_candidates", time_candidates)
    return timed


# Keras's update ops only: the four candidates precision x XLA (the update kinds have tests of their own).
KERAS_UPDATE = "optimizer.update=keras"


def test_the_fastest_candidate_is_chosen_cached_and_the_plan_quotes_the_table(cache, monkeypatch, tmp_path):
    rates = {"fp32 graph": 3000.0, "fp32 xla": None, "bf16 graph": 5000.0}
    timed = fake_timings(monkeypatch, rates, {"fp32 xla": "non-finite (loss nan)"})
    cfg = config("tune=auto", KERAS_UPDATE)
    env, record = tuning.decide(cfg, EPYC_AVX512_BF16, [], tmp_path)
    assert timed == ["fp32 graph", "fp32 xla", "bf16 graph"]
    assert (env.tuned.precision, env.tuned.xla) == ("bf16", False)
    assert record.tune == "bf16 graph" and "fp32 xla non-finite (loss nan)" in record.reason("tune")
    assert "bf16 change the numerics" in record.reason("tune")  # bf16 was timed only because precision=auto
    plan = resolve(cfg, env)
    assert plan.precision.name == "bf16" and not plan.step.xla
    assert "tune: the fastest step timed here" in plan.precision.reason("name")
    stored = json.loads(cache.read_text())[tuning.signature(cfg, EPYC_AVX512_BF16)]
    assert stored["choice"] == {
        "precision": "bf16",
        "xla": False,
        "update": "keras",
        "steps_per_execution": None,
        "layer_swaps": None,
    }
    # The next launch with the same signature reads the cache; tune=force times again.
    again = fake_timings(monkeypatch, rates)
    env2, record2 = tuning.decide(cfg, EPYC_AVX512_BF16, [], tmp_path)
    assert again == [] and env2.tuned == env.tuned and record2.reason("tune").startswith("cached")
    tuning.decide(config("tune=force", KERAS_UPDATE), EPYC_AVX512_BF16, [], tmp_path)
    assert len(again) == 3


def test_the_doctor_reads_the_cached_table_of_the_config_it_examines(cache, monkeypatch, tmp_path):
    cfg = config("tune=auto", KERAS_UPDATE)
    assert "not timed on this machine" in tuning.cached_summary(cfg, EPYC_AVX512_BF16)
    fake_timings(monkeypatch, {"fp32 graph": 3000.0, "fp32 xla": 4200.0, "bf16 graph": 5000.0, "bf16 xla": 100.0})
    started = time.time()
    tuning.decide(cfg, EPYC_AVX512_BF16, [], tmp_path)
    summary = tuning.cached_summary(config("tune=auto", KERAS_UPDATE, "mode=doctor"), EPYC_AVX512_BF16)
    age = re.match(r"bf16 graph: timed (\d+) s ago", summary)  # the winner first, with the cache entry's age
    assert age and int(age[1]) <= time.time() - started + 1, summary
    assert "fp32 xla 4,200 ex/s" in summary


def test_a_tie_within_five_percent_keeps_the_rate_rules_choice(cache, monkeypatch, tmp_path):
    rule = tuning.rule(config(KERAS_UPDATE), EPYC_AVX512_BF16)
    assert rule == Candidate("bf16", False, "keras")  # what the matmul rates pick on this machine
    fake_timings(monkeypatch, {"fp32 graph": 5000.0, "fp32 xla": 5100.0, "bf16 graph": 4950.0, "bf16 xla": 3000.0})
    env, record = tuning.decide(config("tune=auto", KERAS_UPDATE), EPYC_AVX512_BF16, [], tmp_path)
    assert (env.tuned.precision, env.tuned.xla) == ("bf16", False)
    assert "the matmul rates' choice kept" in record.reason("tune")


@pytest.mark.parametrize("overlap", [True, False])
def test_another_precision_is_chosen_only_when_faster_beyond_the_rounds_spread(cache, monkeypatch, tmp_path, overlap):
    """Issue 62, item 4: tune=auto switched to bf16 on overlapping timings (57,852 [42,555-58,861] against
    49,202 [44,773-62,164] ex/s). Here the rule picks bf16 graph; fp32 xla's median is 16% faster."""
    rates = {"fp32 graph": 4000.0, "fp32 xla": 5800.0, "bf16 graph": 5000.0, "bf16 xla": 3000.0}
    spreads = {"fp32 xla": (4300.0, 5900.0) if overlap else (5600.0, 5900.0), "bf16 graph": (4800.0, 5200.0)}
    fake_timings(monkeypatch, rates, spreads=spreads)
    env, record = tuning.decide(config("tune=auto", KERAS_UPDATE), EPYC_AVX512_BF16, [], tmp_path)
    assert (env.tuned.precision, env.tuned.xla) == (("bf16", False) if overlap else ("fp32", True))
    kept = "fp32 xla was not faster than bf16 graph beyond the rounds' spread: the rule's precision (bf16) kept"
    assert (kept in record.reason("tune")) == overlap


def test_when_every_candidate_fails_the_rate_rule_decides_and_nothing_is_cached(cache, monkeypatch, tmp_path):
    fake_timings(monkeypatch, dict.fromkeys(["fp32 graph", "fp32 xla", "bf16 graph", "bf16 xla"]))
    env, record = tuning.decide(config("tune=auto", KERAS_UPDATE), EPYC_AVX512_BF16, [], tmp_path)
    assert env.tuned is None and record.tune == "not tuned" and not cache.exists()


def test_multi_worker_jobs_never_tune_and_explain_only_says_it_would(cache, monkeypatch, tmp_path):
    timed = fake_timings(monkeypatch, {})
    env, record = tuning.decide(config("tune=auto", "strategy=multi_worker"), EPYC_AVX512_BF16, [], tmp_path)
    assert env.tuned is None and "multi-worker jobs never tune" in record.reason("tune")
    env, record = tuning.decide(config("tune=auto", "explain=true"), EPYC_AVX512_BF16, [], tmp_path)
    assert env.tuned is None and "would time 3 candidate steps" in record.reason("tune") and timed == []
    env, record = tuning.decide(config(), EPYC_AVX512_BF16, [], tmp_path)  # tune=off, the default
    assert env.tuned is None and record is None


def test_the_update_kind_and_a_longer_call_are_tuned_and_reach_the_plan(cache, monkeypatch, tmp_path):
    rates = {"fp32 hybrid": 3000.0, "fp32 graph": 3100.0, "fp32 xla": 3800.0}
    rates |= {"bf16 hybrid": 4000.0, "bf16 graph": 5000.0, "bf16 hybrid x64": 5600.0}
    timed = fake_timings(monkeypatch, rates)
    cfg = config("tune=auto")
    env, record = tuning.decide(cfg, EPYC_AVX512_BF16, [], tmp_path)
    # The other update kind and the longer call: beside the fastest step only.
    assert timed == ["fp32 hybrid", "fp32 xla", "bf16 hybrid", "bf16 graph", "bf16 hybrid x64"]
    assert record.tune == "bf16 hybrid x64" and "bf16 hybrid x64 5,600 [5,040-5,600] ex/s" in record.reason("tune")
    plan = resolve(cfg, env)
    assert (plan.precision.name, plan.step.xla, plan.step.update, plan.step.kind) == ("bf16", False, "fused", "hybrid")
    assert plan.step.steps_per_execution == 64 and "tune: 64 steps per call" in plan.step.reason("steps_per_execution")
    assert "tune: the fastest step timed here" in plan.step.reason("update")
    # A longer call within 5 % of the fastest is no gain: Keras's update ops won, at the configured 16 per call.
    fake_timings(monkeypatch, rates | {"bf16 hybrid x64": 5100.0})
    env, record = tuning.decide(config("tune=force"), EPYC_AVX512_BF16, [], tmp_path)
    plan = resolve(cfg, env)
    assert record.tune == "bf16 graph" and (plan.step.update, plan.step.steps_per_execution) == ("keras", 16)


def test_stock_layers_are_chosen_only_when_the_swapped_model_is_timed_slower_and_the_plan_says_so(
    cache, monkeypatch, tmp_path
):
    rates = {"fp32 graph": 3000.0, "fp32 xla": 2000.0, "bf16 graph": 5000.0, "bf16 xla": 4000.0}
    timed = fake_timings(monkeypatch, rates | {"bf16 graph swaps off": 5600.0})
    cfg = config("model=transformer", "tune=auto", KERAS_UPDATE)
    env, record = tuning.decide(cfg, EPYC_AVX512_BF16, [], tmp_path)
    assert timed[-1] == "bf16 graph swaps off"  # beside the fastest step only
    assert record.tune == "bf16 graph swaps off" and env.tuned.layer_swaps == "off"
    plan = resolve(cfg, env)
    assert not plan.layer_swaps.on and plan.values()["model.layer_swaps"] == "off"
    assert "tune: this model's step timed faster with every layer as stock Keras" in plan.layer_swaps.reason("mode")
    # Within 5 %: the swaps stay (the default), and the Plan keeps its reason.
    fake_timings(monkeypatch, rates | {"bf16 graph swaps off": 5200.0})
    env, record = tuning.decide(config("model=transformer", "tune=force", KERAS_UPDATE), EPYC_AVX512_BF16, [], tmp_path)
    assert record.tune == "bf16 graph" and env.tuned.layer_swaps is None
    assert resolve(cfg, env).layer_swaps.on
    # A person's model.layer_swaps=off is kept whatever the table says.
    off = config("model=transformer", "tune=auto", KERAS_UPDATE, "model.layer_swaps=off")
    assert not resolve(off, replace(env, tuned=replace(env.tuned, layer_swaps=None))).layer_swaps.on
    assert Candidate("bf16", False, "fused", layer_swaps="off").applied(cfg).model.layer_swaps == "off"


def test_a_convnet_on_a_cpu_times_no_xla_step_and_the_plan_says_why():
    """XLA's CPU convolutions are several times slower than oneDNN's and each costs ~6 s to compile: a model that
    declares itself convolutional is timed without them on CPUs; on a GPU they stay candidates."""
    found, left_out = tuning.candidates(config("model=cnn", "precision=auto", "xla=auto"), EPYC_AVX512_BF16)
    assert labels(found) == ["fp32 hybrid", "bf16 hybrid"]
    assert any(reason.startswith("xla: CPU, model=cnn is convolutional") for reason in left_out), left_out
    on_gpu, _ = tuning.candidates(config("model=cnn", "precision=auto", "xla=auto"), ONE_A100)
    assert {"fp32 xla", "bf16 xla"} <= set(labels(on_gpu))
    # Not convolutional: its XLA steps are timed on the same CPU.
    assert "fp32 xla" in labels(tuning.candidates(config("precision=auto", "xla=auto"), EPYC_AVX512_BF16)[0])


def test_after_two_rounds_a_far_slower_candidate_is_timed_no_further(monkeypatch):
    """Rounds of fake rates: a candidate whose better round of the first two is below 70% of the fastest's keeps
    those rounds in the table with why; one slowed by a burst in a single round (65, then 99) and the close one run
    every round; a candidate that failed is not timed."""
    from launcher.launch import step_timing

    per_round = {
        "fast": [100.0, 104.0, 98.0],
        "close": [75.0, 90.0, 88.0],
        "burst": [65.0, 99.0, 99.0],
        "slow": [65.0, 70.0, 99.0],
    }

    def fake_round(timed):
        timed.rates.append(per_round[timed.candidate.precision][len(timed.rates)])

    monkeypatch.setattr(step_timing, "time_round", fake_round)
    prepared = [step_timing.Timed(Candidate(name, False), engine=object()) for name in per_round]
    failed = step_timing.Timed(Candidate("bf16", True), engine=None, note="refused: xla")
    step_timing._rounds([*prepared, failed], 3, cut=True)
    fast, close, burst, slow = (t.row() for t in prepared)
    assert (fast["examples_per_sec"], fast["spread"], fast["note"]) == (100.0, [98.0, 104.0], "")
    assert (close["examples_per_sec"], close["note"]) == (88.0, "")
    assert (burst["examples_per_sec"], burst["note"]) == (99.0, "")  # judged on one round it would have been cut
    assert slow["examples_per_sec"] == 67.5 and slow["note"] == "2 rounds: below 70% of the fastest's 104"
    assert failed.rates == [] and failed.row()["examples_per_sec"] is None
    # In the Plan's table the cut row says why it has fewer rounds; a timed row gives its spread.
    assert tuning._row_text({"step": "fp32 xla", **slow}) == (
        "fp32 xla 68 ex/s (2 rounds: below 70% of the fastest's 104)"
    )
    assert tuning._row_text({"step": "fp32 graph", **fast}) == "fp32 graph 100 [98-104] ex/s"
    # Without the cut every candidate runs every round.
    again = [step_timing.Timed(Candidate(name, False), engine=object()) for name in per_round]
    step_timing._rounds(again, 3)
    assert [len(t.rates) for t in again] == [3, 3, 3, 3]
    # The fastest beside its variants: judged by this phase's rounds (the fastest ran faster in its first three).
    best = step_timing.Timed(Candidate("best", False), engine=object(), rates=[140.0, 140.0, 140.0])
    variants = [step_timing.Timed(Candidate(name, False), engine=object()) for name in ("near", "far")]
    per_round |= {"best": [140.0] * 3 + [100.0] * 3, "near": [75.0, 75.0, 75.0], "far": [60.0, 65.0, 99.0]}
    step_timing._rounds([best, *variants], 3, cut=True)
    near, far = variants
    assert (len(best.rates), len(near.rates), near.note) == (6, 3, "")
    assert far.note == "2 rounds: below 70% of the fastest's 100"


def test_a_rounds_first_chunk_runs_untimed_and_its_rate_is_the_median_chunks(monkeypatch):
    """The first chunk after switching from another candidate is several times slower than the rest: it is run, not
    timed; the round's rate is that of its median chunk, so one slow chunk moves it little."""
    from types import SimpleNamespace

    from launcher.contract import Position
    from launcher.launch import step_timing

    clock = iter([0.0, 5.0, 5.2, 5.8, 6.0])  # chunk ends: 5 s (switching), then 0.2, 0.6 (a burst), 0.2 s
    monkeypatch.setattr(step_timing.time, "perf_counter", lambda: next(clock))
    model = SimpleNamespace(stop_training=False)
    watch = step_timing._Stopwatch(
        SimpleNamespace(model=model, global_batch=10), min_chunks=3, min_seconds=0.0, settle=1
    )
    position, logs = Position(), {"telemetry": SimpleNamespace(ran=2, losses=[1.0, 1.0])}
    watch.steps_until_boundary(position)
    for _ in range(3):
        watch.after_steps(position, logs)
        assert not model.stop_training  # the settling chunk is not one of the three
    watch.after_steps(position, logs)
    assert model.stop_training and watch.chunks == 3 and watch.steps == 6
    assert watch.per_step == pytest.approx([0.1, 0.3, 0.1])
    assert watch.rate == pytest.approx(100.0)  # 10 examples per 0.1 s step


def test_a_rounds_slow_first_chunks_settle_untimed_and_a_chunk_at_speed_is_timed_at_once(monkeypatch):
    """A stall can span more than one call: chunks slower than `settled_sec` a step are run, not timed, up to
    `settle` of them; the first chunk at speed ends the settling, and a round starting at speed settles nothing."""
    from types import SimpleNamespace

    from launcher.contract import Position
    from launcher.launch import step_timing

    def round_of(chunk_ends, settle):
        clock = iter(chunk_ends)
        monkeypatch.setattr(step_timing.time, "perf_counter", lambda: next(clock))
        watch = step_timing._Stopwatch(
            SimpleNamespace(model=SimpleNamespace(stop_training=False), global_batch=10),
            min_chunks=2,
            min_seconds=0.0,
            settle=settle,
            settled_sec=0.15,
        )
        position, logs = Position(), {"telemetry": SimpleNamespace(ran=1, losses=[1.0])}
        watch.steps_until_boundary(position)
        while not watch.model.stop_training:
            watch.after_steps(position, logs)
        return watch.per_step

    # Two stalled calls (0.6, 0.5 s), then 0.1 s steps: only those are timed.
    assert round_of([0.0, 0.6, 1.1, 1.2, 1.3], settle=3) == pytest.approx([0.1, 0.1])
    # At most `settle` chunks settle: a third slow one is timed.
    assert round_of([0.0, 0.6, 1.1, 1.4, 1.5], settle=2) == pytest.approx([0.3, 0.1])
    # At speed from the start: nothing is left untimed.
    assert round_of([0.0, 0.1, 0.2], settle=3) == pytest.approx([0.1, 0.1])


def test_a_longer_call_is_tried_only_where_the_person_left_steps_per_execution_at_its_default():
    assert tuning.more_steps_per_call(config(), []) == (64,)
    assert tuning.more_steps_per_call(config("train.steps_per_execution=16"), ["train.steps_per_execution=16"]) == ()
    assert tuning.more_steps_per_call(config("train.steps_per_execution=8"), []) == ()  # set in a config file


def test_the_timing_child_times_each_candidate_in_rounds_and_says_why_one_could_not_run():
    """`launcher.launch.step_timing` in this process: the real review, build and engine for each candidate."""
    from launcher.launch import step_timing

    cfg = config(*TINY, "precision=fp32", "optimizer.name=rmsprop")
    good, refused = Candidate("fp32", False, "keras"), Candidate("fp32", False, "fused")  # rmsprop has no fused kernel
    rows = step_timing.time_all([good, refused], cfg, EPYC_AVX512_BF16, rounds=2)
    assert [Candidate(**r["candidate"]) for r in rows] == [good, refused]
    low, high = rows[0]["spread"]
    assert 0 < low <= rows[0]["examples_per_sec"] <= high and rows[0]["note"] == ""
    assert rows[1]["examples_per_sec"] is None and rows[1]["note"].startswith("refused: ")
    # A learning rate that sends the loss to infinity: the candidate goes non-finite and has no rate.
    diverging = config(*TINY, "precision=fp32", "optimizer.name=sgd", "optimizer.learning_rate=1e30")
    (row,) = step_timing.time_all([Candidate("fp32", False, "keras")], diverging, EPYC_AVX512_BF16, rounds=1)
    assert row["examples_per_sec"] is None and "non-finite" in row["note"], row


def test_the_timing_child_times_a_model_with_swapped_layers_as_stock_keras_too():
    """The fastest candidate's build swapped the transformer's GELU layers: a copy with every layer stock is timed
    beside it; a model with nothing to swap (the MLP above) is not timed twice."""
    from launcher.launch import step_timing

    lm = [
        *("model=transformer", "task=sequence", "dataset=synthetic", "dataset.kind=tokens", "dataset.vocab_size=32"),
        *("dataset.shape=[16]", "dataset.num_examples=200", "scaling.batch_size=16", "train.steps_per_execution=2"),
        *("model.embed_dim=16", "model.num_heads=2", "model.ff_dim=32", "model.num_layers=1", "precision=fp32"),
    ]
    swapped = Candidate("fp32", False, "keras")
    rows = step_timing.time_all([swapped], config(*lm), EPYC_AVX512_BF16, rounds=1)
    assert [Candidate(**r["candidate"]).label for r in rows] == ["fp32 graph", "fp32 graph swaps off"]
    assert all(r["examples_per_sec"] and r["note"] == "" for r in rows), rows


def test_a_table_timed_on_a_busy_machine_is_timed_again_a_minute_later_and_a_sound_one_is_kept(
    cache, monkeypatch, tmp_path
):
    """The first timing runs while other processes hold 60% of the CPU and ranks fp32 first; it is provisional:
    the launches within 60 s use it (and say so), the first launch 60 s or more later times again on the now
    idle machine and switches to bf16, which stays. A week later a busy re-timing never replaces that sound table."""
    now, busy = [1000.0], [0.6]
    monkeypatch.setattr(tuning, "clock", lambda: now[0])
    monkeypatch.setattr(tuning, "others_share", lambda before, after: busy[0])
    cfg = config("tune=auto", KERAS_UPDATE)
    under_load = {"fp32 graph": 3000.0, "fp32 xla": 2000.0, "bf16 graph": 1500.0, "bf16 xla": 1000.0}
    idle = {"fp32 graph": 3000.0, "fp32 xla": 4200.0, "bf16 graph": 5000.0, "bf16 xla": 3000.0}
    timed = fake_timings(monkeypatch, under_load)
    env, record = tuning.decide(cfg, EPYC_AVX512_BF16, [], tmp_path)
    assert env.tuned.precision == "fp32" and "provisional: timed while other processes used 60%" in record.reason(
        "tune"
    )
    busy[0], now[0] = 0.01, 1030.0
    timed = fake_timings(monkeypatch, idle)
    env, record = tuning.decide(cfg, EPYC_AVX512_BF16, [], tmp_path)
    assert timed == [] and env.tuned.precision == "fp32"
    assert "timed again by a launch from 30 s on" in record.reason("tune")
    now[0] = 1061.0
    env, record = tuning.decide(cfg, EPYC_AVX512_BF16, [], tmp_path)
    assert len(timed) == 3 and env.tuned.precision == "bf16" and "provisional" not in record.reason("tune")
    now[0] = 5000.0
    env, record = tuning.decide(cfg, EPYC_AVX512_BF16, [], tmp_path)
    assert len(timed) == 3 and env.tuned.precision == "bf16" and record.reason("tune").startswith("cached")
    # A week on the table is timed again; under load, the result does not replace the sound table.
    busy[0], now[0] = 0.7, 1061.0 + tuning.MAX_AGE_SEC
    timed = fake_timings(monkeypatch, under_load)
    env, record = tuning.decide(cfg, EPYC_AVX512_BF16, [], tmp_path)
    assert len(timed) == 3 and env.tuned.precision == "bf16" and record.reason("tune").startswith("cached")


def test_an_unknown_tune_value_is_refused_by_the_resolver_with_the_other_problems():
    cfg = config("tune=sometimes", "xla=maybe")
    assert tuning.decide(cfg, EPYC_AVX512_BF16, [], ROOT) == (EPYC_AVX512_BF16, None)  # nothing timed
    _, problems = resolve_all(cfg, EPYC_AVX512_BF16)
    assert {"tune", "xla"} <= {p.key for p in problems}


def test_a_first_launch_times_the_steps_and_a_second_reads_the_cache_and_picks_the_same(
    tmp_path, launcher_here, monkeypatch
):
    """Both launches through the real entry in this process (the timing child is a real process either way)."""
    env = {"LAUNCHER_CACHE": str(tmp_path / "cache")}
    os.makedirs(env["LAUNCHER_CACHE"])  # the suite's fixed matmul rates, in a cache of this test's own
    shutil.copy(os.path.join(os.environ["LAUNCHER_CACHE"], "matmul_rates.json"), env["LAUNCHER_CACHE"])
    # One timed round per candidate: rounds, their spread and the cut are the timing child's tests above; here the
    # launch times, caches and reads back. What the child is sent is the launch's own (tuning.ROUNDS, read per call).
    monkeypatch.setattr(tuning, "ROUNDS", 1)
    # precision fixed: two candidates (fp32 hybrid, xla; graph beside hybrid when it is the faster) keep the test
    # short; which wins does not matter here. One epoch, nothing saved: neither changes the step timed (signature).
    run = ["tune=auto", "precision=fp32", *TINY, "train.epochs=1", "checkpoint.enabled=false"]
    first = launcher_here([*run, "tracking.enabled=false", f"hydra.run.dir={tmp_path}/one"], ROOT, env)
    assert first.returncode == 0, first.stderr[-2000:]
    decided = yaml.safe_load((tmp_path / "one" / "plan.yaml").read_text())["decisions"]
    assert decided["tune"]["reason"].startswith("timed now in")
    assert "change the numerics" not in decided["tune"]["reason"]  # precision=fp32: every candidate is float32
    table = json.loads((tmp_path / "cache" / "step_tuning.json").read_text())
    (entry,) = table.values()
    steps = [row["step"] for row in entry["table"]]
    assert steps[:2] == STEPS("fp32") and steps[2:] in ([], ["fp32 graph"]), steps
    assert all(row["examples_per_sec"] > 0 and row["spread"][0] <= row["examples_per_sec"] for row in entry["table"])
    assert json.loads((tmp_path / "one" / "step_tuning.json").read_text())["table"] == entry["table"]
    uri = store(tmp_path / "mlflow.db")
    second = launcher_here([*run, f"tracking.uri={uri}", f"hydra.run.dir={tmp_path}/two"], ROOT, env)
    assert second.returncode == 0, second.stderr[-2000:]
    again = yaml.safe_load((tmp_path / "two" / "plan.yaml").read_text())["decisions"]
    assert again["tune"]["reason"].startswith("cached") and again["tune"]["value"] == decided["tune"]["value"]
    for key in ("precision", "xla", "optimizer.update"):
        assert again[key]["value"] == decided[key]["value"], key
    # The table the choice came from is the run's artifact in MLflow.
    client = MlflowClient(uri)
    (logged,) = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    assert "step_tuning.json" in {a.path for a in client.list_artifacts(logged.info.run_id)}


def test_jobs_of_a_sweep_over_what_does_not_change_a_steps_speed_share_one_measurement():
    """Issue 62, item 4: jobs of one sweep time their steps once between them unless a swept key changes the step."""
    base = tuning.signature(config("tune=auto", "model.dropout=0.2"), EPYC_AVX512_BF16)
    for same in ("optimizer.learning_rate=0.01", "train.epochs=9", "seed=3", "model.dropout=0.3"):
        assert tuning.signature(config("tune=auto", "model.dropout=0.2", same), EPYC_AVX512_BF16) == base, same
    for other in ("model.hidden_units=[64]", "model.dropout=0.0"):  # at 0 the dropout layer is left out
        assert tuning.signature(config("tune=auto", "model.dropout=0.2", other), EPYC_AVX512_BF16) != base, other
