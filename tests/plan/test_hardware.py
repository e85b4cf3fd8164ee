"""Measured matmul rates: measured per machine in a child process, in interleaved rounds with their spread and
the machine's load, cached; a provisional figure (busy machine, disagreeing samples, one old sample) is measured
again; what auto falls back on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from fakes import CPU_AVX512_BF16
from support.config import config

from launcher.plan import hardware
from launcher.plan.resolve import resolve

RATES = {"float32_graph": 200.0, "float32_xla": 190.0, "bfloat16_graph": 400.0, "bfloat16_xla": 190.0}
TIGHT = {key: [rate * 0.98, rate * 1.01] for key, rate in RATES.items()}


def sound(at: float = 0.0, **changes) -> hardware.Measurement:
    """A figure measured at `at` on an idle machine, three samples close together."""
    fields = {"rates": dict(RATES), "spread": TIGHT, "rounds": 3, "measured_at": at, "checked_at": at, "busy": 0.01}
    return hardware.Measurement(**{**fields, **changes})


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LAUNCHER_CACHE", str(tmp_path))
    return tmp_path / "matmul_rates.json"


def test_cached_rates_of_this_machine_are_used_without_measuring(cache, monkeypatch):
    entry = sound(time.time()).to_json()
    cache.write_text(json.dumps({hardware.machine_key(): entry, "another machine": {"float32_graph": 1.0}}))
    monkeypatch.setattr(hardware, "_measure_in_child", lambda: pytest.fail("measured although cached"))
    assert hardware.measured_rates() == RATES


def test_a_cache_miss_measures_once_and_keeps_other_machines(cache, monkeypatch):
    cache.write_text(json.dumps({"another machine": {"float32_graph": 1.0}}))
    calls = []
    monkeypatch.setattr(hardware, "_measure_in_child", lambda: calls.append(1) or sound())
    assert hardware.measured_rates() == RATES
    assert hardware.measured_rates() == RATES
    assert len(calls) == 1
    saved = json.loads(cache.read_text())
    assert saved[hardware.machine_key()]["rates"] == RATES and "another machine" in saved


@pytest.mark.parametrize(
    ("figure", "why"),
    [
        (sound(busy=0.5), "other processes used 50% of the CPU"),
        (sound(spread={**TIGHT, "bfloat16_graph": [204.7, 370.0]}), "samples disagree"),
        (hardware.Measurement.from_json(RATES), "a single sample"),  # a figure cached before rounds existed
    ],
)
def test_a_figure_from_a_busy_machine_disagreeing_samples_or_one_sample_is_provisional(figure, why):
    assert figure.provisional and why in "; ".join(figure.problems())
    assert "provisional" in figure.describe(figure.checked_at + 10)
    assert not sound().provisional and sound().problems() == []


def test_when_a_launch_measures_again():
    week = hardware.MAX_AGE_SEC
    assert not sound(at=0).due(100.0)  # sound and fresh
    assert sound(at=0).due(week + 1)  # sound but old
    busy = sound(at=0, busy=0.6)
    assert not busy.due(hardware.RETRY_SEC - 1) and busy.due(hardware.RETRY_SEC)  # not at every launch of a burst
    assert hardware.Measurement.from_json(RATES).due(hardware.RETRY_SEC)


def test_a_figure_taken_under_load_is_replaced_by_the_first_launch_a_minute_later(cache, monkeypatch):
    """The issue's case (AMD EPYC): a first launch on a busy machine cached bf16 at 1.16x float32; the idle
    machine gives ~2x. The bad figure serves the launches of the next minute, the next one measures again."""
    clock = Clock()
    loaded = sound(rates={**RATES, "bfloat16_graph": 232.0}, busy=0.55)
    idle = sound()
    results = iter([loaded, idle])
    calls = []
    monkeypatch.setattr(hardware, "_measure_in_child", lambda: calls.append(1) or next(results))
    first = hardware.measurement(clock)
    assert first.provisional and first.rates["bfloat16_graph"] == 232.0
    clock.now += 30
    assert hardware.measurement(clock).rates["bfloat16_graph"] == 232.0 and len(calls) == 1
    clock.now += hardware.RETRY_SEC
    again = hardware.measurement(clock)
    assert len(calls) == 2 and not again.provisional and again.rates["bfloat16_graph"] == 400.0
    assert again.measured_at == clock.now
    clock.now += 3600
    assert hardware.measurement(clock) == again and len(calls) == 2  # sound: kept for a week


def test_debug_fast_decides_by_the_cached_figure_whatever_its_age_and_never_measures(cache, monkeypatch):
    """train.remeasure_matmul=false (debug=fast: "does it run?"): a due figure is used as it is, and said so;
    with none cached, auto decides by the CPU's flags. Measuring here took a 2-core CPU 12 s of its 15."""
    clock = Clock()
    monkeypatch.setattr(hardware, "_measure_in_child", lambda: pytest.fail("measured with remeasure_matmul=false"))
    assert hardware.measurement(clock, refresh=False) is None
    busy = sound(at=clock.now - hardware.MAX_AGE_SEC, busy=0.6)
    cache.write_text(json.dumps({hardware.machine_key(): busy.to_json()}))
    assert busy.due(clock.now) and hardware.measurement(clock, refresh=False) == busy
    assert hardware.cached_measurement(clock, refresh=False) == busy and hardware.cached_measurement(clock) is None
    assert busy.describe(clock.now, refresh=False).endswith("not measured again (train.remeasure_matmul=false)")


def test_a_provisional_remeasurement_does_not_replace_a_sound_figure(cache, monkeypatch):
    clock = Clock()
    cache.write_text(json.dumps({hardware.machine_key(): sound(at=clock.now - hardware.MAX_AGE_SEC).to_json()}))
    monkeypatch.setattr(hardware, "_measure_in_child", lambda: sound(rates={**RATES, "float32_graph": 50.0}, busy=0.9))
    kept = hardware.measurement(clock)
    assert kept.rates == RATES and kept.checked_at == clock.now  # tried now: not again for a minute
    clock.now += 10
    monkeypatch.setattr(hardware, "_measure_in_child", lambda: pytest.fail("measured again within the minute"))
    assert hardware.measurement(clock).rates == RATES


def test_the_plan_quotes_the_figures_samples_age_and_why_it_is_provisional():
    from fakes import EPYC_AVX512_BF16

    figure = sound(at=1.0, busy=0.5)
    env = replace(EPYC_AVX512_BF16, matmul_trust=figure.describe(7201.0))
    reason = resolve(config("precision=auto", "xla=auto"), env).precision.reason("name")
    assert "median of 3 interleaved samples, measured 2 h ago" in reason
    assert "provisional (measured while other processes used 50% of the CPU)" in reason


def test_a_failed_measurement_is_not_cached_and_auto_falls_back_to_cpu_flags(cache, monkeypatch):
    monkeypatch.setattr(hardware, "_measure_in_child", lambda: None)
    assert hardware.measured_rates() == {}
    assert not cache.exists()
    plan = resolve(config("precision=auto", "xla=auto"), CPU_AVX512_BF16)  # flags only, nothing measured
    assert plan.precision.name == "fp32"
    assert "not measured" in plan.precision.reason("name")


def test_the_machine_key_changes_with_the_cpu(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.write_text("model name\t: CPU A\nflags\t\t: avx2 fma\n")
    two.write_text("model name\t: CPU A\nflags\t\t: avx2 fma amx_bf16\n")
    assert hardware.machine_key(one) != hardware.machine_key(two)
    assert hardware.machine_key(one).startswith("CPU A|") and "|tf" in hardware.machine_key(one)


@pytest.mark.e2e  # the launcher measures in a child process of its own
def test_measuring_in_a_child_process_gives_every_dtype_and_backend_and_sees_a_busy_machine(
    cache, tmp_path, monkeypatch
):
    """The real thing (`python -m launcher.plan.hardware`, ~12 s), with busy loops on half the cores from the moment
    the child says its timed rounds begin: the figure is provisional, and once RETRY_SEC has passed (0 here) the
    next launch measures again (the policy itself, with a clock:
    test_a_figure_taken_under_load_is_replaced_by_the_first_launch_a_minute_later)."""
    # Half the cores kept busy: other processes' share measured 0.365 twice on 2 cores (AMD EPYC), against the
    # 0.25 threshold; a loop per core would take as much CPU again from the tests running beside this one. The
    # loops spin during the timed rounds only (not the child's TensorFlow import and compiles): ~half the CPU.
    begun = tmp_path / "rounds-begun"
    monkeypatch.setenv(hardware.ROUNDS_BEGUN_ENV, str(begun))
    spin = f"import os, time\nwhile not os.path.exists({str(begun)!r}):\n    time.sleep(0.05)\nwhile True:\n    pass"
    busy_cores = max(1, (os.cpu_count() or 1) // 2)
    loops = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(busy_cores)]
    try:
        loaded = hardware.measurement()
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    assert begun.exists()  # the child said when its rounds began: the loops ran during them
    assert set(loaded.rates) == {f"{d}_{b}" for d in hardware.DTYPES for b in hardware.BACKENDS}
    assert all(rate > 0 for rate in loaded.rates.values()) and loaded.rounds == hardware.ROUNDS
    assert all(low <= loaded.rates[key] <= high for key, (low, high) in loaded.spread.items())
    assert loaded.busy > hardware.BUSY_SHARE and loaded.provisional  # the loops had about half the CPU
    assert json.loads(cache.read_text())[hardware.machine_key()] == loaded.to_json()
    monkeypatch.setattr(hardware, "RETRY_SEC", 0.0)
    assert hardware.Measurement.from_json(json.loads(cache.read_text())[hardware.machine_key()]).due(time.time())


def test_concurrent_launches_on_one_machine_measure_once(cache, monkeypatch):
    import threading

    calls = []

    def slow_measurement():
        calls.append(1)
        time.sleep(0.3)  # the other launches arrive while this one measures
        return sound()

    monkeypatch.setattr(hardware, "_measure_in_child", slow_measurement)
    results = []
    threads = [threading.Thread(target=lambda: results.append(hardware.measured_rates())) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [RATES] * 3
    assert len(calls) == 1
