"""The strategy table: one entry per `strategy=` choice, and the resolver, the cluster finder, the runtime, the local
launcher and the doctor deciding by what the entry says, not by its name."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fakes import CPU_PLAIN, ONE_V100
from support.config import CONF_DIR, compose, config

from launcher.config.errors import ConfigError
from launcher.config.schema import StrategyKind
from launcher.config.strategies import STRATEGIES, ClusterForm, Placement, WorkerStart, strategy_of
from launcher.plan.cluster import find_cluster
from launcher.plan.resolve import resolve, wants_measurements
from launcher.plan.rules.strategy import PLACEMENTS
from launcher.supervise.local_workers import local_worker_count
from launcher.train import runtime

TWO_WORKERS = ("strategy.workers=[10.0.0.1:2000,10.0.0.2:2000]",)


def patch(monkeypatch, name: str, **fields) -> None:
    monkeypatch.setitem(STRATEGIES, name, replace(STRATEGIES[name], **fields))


def test_every_strategy_choice_has_an_entry_its_yaml_and_its_builder():
    yaml = {p.stem for p in (CONF_DIR / "strategy").glob("*.yaml")}
    assert set(STRATEGIES) == {k.value for k in StrategyKind} == yaml
    assert all(name == entry.name for name, entry in STRATEGIES.items())
    assert {entry.builder for entry in STRATEGIES.values()} <= set(runtime.BUILDERS)
    assert set(PLACEMENTS) == set(Placement)
    composed = compose("strategy=mirrored").strategy.kind  # the node the entry point holds: a StrategyKind too
    assert strategy_of(StrategyKind.mirrored) is strategy_of(composed) is STRATEGIES["mirrored"]


def test_what_each_strategy_is():
    single = {name for name, entry in STRATEGIES.items() if entry.single_process}
    assert single == {"default", "one_device", "mirrored"}
    assert STRATEGIES["multi_worker"].cluster is ClusterForm.multi_worker
    assert {n for n, e in STRATEGIES.items() if e.workers is WorkerStart.per_worker} == {"multi_worker"}
    assert STRATEGIES["mirrored"].placement is Placement.local_devices


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (("strategy=default",), "requested: one device, no tf.distribute wrapping"),
        (("strategy=one_device",), "requested: OneDeviceStrategy"),
        (("strategy=mirrored",), "requested: MirroredStrategy (synchronous data parallel)"),
        (("strategy=multi_worker", *TWO_WORKERS), "requested: MultiWorkerMirroredStrategy"),
    ],
)
def test_the_plan_names_the_strategy_as_the_entry_describes_it(overrides, reason):
    plan = resolve(config(*overrides), CPU_PLAIN).strategy
    assert (plan.kind, plan.reason("kind")) == (overrides[0].split("=")[1], reason)


def test_the_placement_of_the_entry_picks_the_devices(monkeypatch):
    assert resolve(config("strategy=default"), ONE_V100).strategy.devices == ["/gpu:0"]
    assert resolve(config("strategy=one_device", "strategy.device=/cpu:0"), ONE_V100).strategy.devices == ["/cpu:0"]
    assert resolve(config("strategy=mirrored", "strategy.devices=3"), CPU_PLAIN).strategy.logical_cpus == 3
    patch(monkeypatch, "default", placement=Placement.local_devices)
    plan = resolve(config("strategy=default"), CPU_PLAIN).strategy
    assert (plan.devices, plan.logical_cpus, plan.replicas) == (["/cpu:0", "/cpu:1"], 2, 2)
    patch(monkeypatch, "mirrored", placement=Placement.chosen_device)
    with pytest.raises(ConfigError, match=r"strategy.device='/gpu:1'.*there is no GPU 1"):
        resolve(config("strategy=mirrored", "strategy.device=/gpu:1"), ONE_V100)


def test_a_strategy_has_a_cluster_only_when_its_entry_says_so(monkeypatch):
    mirrored = config("strategy=mirrored", *TWO_WORKERS)
    assert find_cluster(mirrored.strategy, None, {}) == (None, [])
    assert resolve(mirrored, CPU_PLAIN).cluster is None and wants_measurements(config("strategy=mirrored", "xla=auto"))
    patch(monkeypatch, "mirrored", cluster=ClusterForm.multi_worker)
    cluster, problems = find_cluster(mirrored.strategy, None, {})
    assert problems == [] and cluster.workers == ("10.0.0.1:2000", "10.0.0.2:2000")
    plan = resolve(mirrored, CPU_PLAIN)
    assert plan.cluster.workers == list(cluster.workers) and plan.strategy.replicas == 4  # 2 workers x 2 devices
    assert not wants_measurements(config("strategy=mirrored", "xla=auto"))
    with pytest.raises(ConfigError, match=r"strategy='mirrored': expected a cluster"):
        resolve(config("strategy=mirrored"), CPU_PLAIN)


def test_a_multi_worker_entry_made_single_process_looks_for_no_cluster(monkeypatch):
    assert not wants_measurements(config("strategy=multi_worker", "precision=auto"))
    patch(monkeypatch, "multi_worker", cluster=ClusterForm.single_process)
    assert find_cluster(config("strategy=multi_worker").strategy, None, {}) == (None, [])
    plan = resolve(config("strategy=multi_worker"), CPU_PLAIN)  # no cluster named, and none needed
    assert plan.cluster is None and plan.strategy.replicas == 1
    assert wants_measurements(config("strategy=multi_worker", "precision=auto"))


def test_local_workers_start_only_for_a_strategy_whose_workers_are_processes(monkeypatch):
    local = ("strategy=multi_worker", "strategy.local_workers=3")
    assert local_worker_count(config(*local).strategy) == 3
    assert local_worker_count(compose(*local).strategy) == 3  # the composed node, as the entry point holds it
    assert local_worker_count(config("strategy=mirrored", "strategy.local_workers=3").strategy) == 0
    assert resolve(config(*local), CPU_PLAIN).strategy.local_workers == 3
    patch(monkeypatch, "multi_worker", workers=WorkerStart.in_process)
    assert local_worker_count(config(*local).strategy) == 0
    with pytest.raises(ConfigError, match=r"strategy='multi_worker': expected a cluster"):
        resolve(config(*local), CPU_PLAIN)  # this process is one worker: it must be told its cluster


def test_the_runtime_builds_with_the_builder_the_entry_names(monkeypatch):
    monkeypatch.setattr(runtime, "BUILDERS", {name: (lambda plan, name=name: name) for name in runtime.BUILDERS})
    for overrides in (("strategy=default",), ("strategy=one_device",), ("strategy=mirrored",)):
        plan = resolve(config(*overrides), CPU_PLAIN)
        assert runtime.make_strategy(plan) == STRATEGIES[plan.strategy.kind].builder
    assert runtime.make_strategy(resolve(config("strategy=multi_worker", *TWO_WORKERS), CPU_PLAIN)) == "multi_worker"
    patch(monkeypatch, "default", builder="mirrored")
    assert runtime.make_strategy(resolve(config("strategy=default"), CPU_PLAIN)) == "mirrored"
    plan = resolve(config(), CPU_PLAIN)
    with pytest.raises(ValueError, match="unknown strategy 'ring'"):
        runtime.make_strategy(replace(plan, strategy=replace(plan.strategy, kind="ring")))


@pytest.mark.parametrize(
    ("kind", "made"),
    [
        ("default", "_DefaultDistributionStrategy"),
        ("one_device", "OneDeviceStrategy"),
        ("mirrored", "MirroredStrategy"),
    ],
)
def test_each_builder_makes_its_strategy(kind, made):
    """The real builders, on this test process's two logical CPU devices."""
    strategy = runtime.make_strategy(resolve(config(f"strategy={kind}"), CPU_PLAIN))
    assert type(strategy).__name__ == made
    assert strategy.num_replicas_in_sync == (2 if kind == "mirrored" else 1)


def test_the_doctor_refuses_a_strategy_of_several_processes_by_its_entry(monkeypatch, tmp_path):
    from launcher.doctor.doctor_mode import _examine

    with pytest.raises(ConfigError, match=r"strategy='multi_worker': expected a single-process strategy"):
        _examine(compose("strategy=multi_worker"), tmp_path / "doctor", tmp_path, "")
    patch(monkeypatch, "mirrored", cluster=ClusterForm.multi_worker)
    with pytest.raises(ConfigError, match=r"strategy='mirrored': expected a single-process strategy"):
        _examine(compose("strategy=mirrored"), tmp_path / "doctor", tmp_path, "")
