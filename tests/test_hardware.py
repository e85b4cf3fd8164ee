"""Measured matmul rates: measured once per machine in a child process, cached, and what auto falls back on."""

from __future__ import annotations

import json

import pytest
from conftest import config
from fakes import CPU_AVX512_BF16

from launcher.plan import hardware
from launcher.plan.resolve import resolve

RATES = {"float32_graph": 200.0, "float32_xla": 190.0, "bfloat16_graph": 400.0, "bfloat16_xla": 190.0}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LAUNCHER_CACHE", str(tmp_path))
    return tmp_path / "matmul_rates.json"


def test_cached_rates_of_this_machine_are_used_without_measuring(cache, monkeypatch):
    cache.write_text(json.dumps({hardware.machine_key(): RATES, "another machine": {"float32_graph": 1.0}}))
    monkeypatch.setattr(hardware, "_measure_in_child", lambda: pytest.fail("measured although cached"))
    assert hardware.measured_rates() == RATES


def test_a_cache_miss_measures_once_and_keeps_other_machines(cache, monkeypatch):
    cache.write_text(json.dumps({"another machine": {"float32_graph": 1.0}}))
    calls = []
    monkeypatch.setattr(hardware, "_measure_in_child", lambda: calls.append(1) or dict(RATES))
    assert hardware.measured_rates() == RATES
    assert hardware.measured_rates() == RATES
    assert len(calls) == 1
    saved = json.loads(cache.read_text())
    assert saved[hardware.machine_key()] == RATES and "another machine" in saved


def test_a_failed_measurement_is_not_cached_and_auto_falls_back_to_cpu_flags(cache, monkeypatch):
    monkeypatch.setattr(hardware, "_measure_in_child", dict)
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
def test_measuring_in_a_child_process_gives_every_dtype_and_backend(cache):
    rates = hardware.measured_rates()  # the real thing: `python -m launcher.plan.hardware`, ~10 s
    assert set(rates) == {f"{d}_{b}" for d in hardware.DTYPES for b in hardware.BACKENDS}
    assert all(rate > 0 for rate in rates.values())
    assert json.loads(cache.read_text()) == {hardware.machine_key(): rates}


def test_concurrent_launches_on_one_machine_measure_once(cache, monkeypatch):
    import threading
    import time

    calls = []

    def slow_measurement():
        calls.append(1)
        time.sleep(0.3)  # the other launches arrive while this one measures
        return dict(RATES)

    monkeypatch.setattr(hardware, "_measure_in_child", slow_measurement)
    results = []
    threads = [threading.Thread(target=lambda: results.append(hardware.measured_rates())) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [RATES] * 3
    assert len(calls) == 1
