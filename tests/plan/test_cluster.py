"""Cluster specs (pure): strategy.workers, TF_CONFIG and Slurm, and every bad spec refused with a fix."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fakes import CPU_PLAIN, ONE_V100
from support.config import compose, config

from launcher.config.errors import ConfigError
from launcher.plan.cluster import expand_counts, expand_hostlist, find_cluster
from launcher.plan.resolve import resolve
from launcher.train.agreement import comparable, differences, disagreement


def strategy(**fields):
    return replace(config("strategy=multi_worker").strategy, **fields)


def test_workers_from_config_name_the_chief_by_index():
    cluster, problems = find_cluster(strategy(workers=["10.0.0.1:2000", "10.0.0.2:2000"], task_index=1), None, {})
    assert problems == []
    assert cluster.workers == ("10.0.0.1:2000", "10.0.0.2:2000") and cluster.index == 1
    assert not cluster.is_chief and cluster.task == ("worker", 1)


@pytest.mark.parametrize(
    ("workers", "index", "key", "expected"),
    [
        (["127.0.0.1:2000", "127.0.0.1:2000"], 0, "strategy.workers", "listed twice"),
        (["127.0.0.1:2000", "127.0.0.1:2001"], 2, "strategy.task_index", r"0\.\.1"),
        (["127.0.0.1", "127.0.0.1:2001"], 0, "strategy.workers", "host:port"),
        (["127.0.0.1:70000", "127.0.0.1:2001"], 0, "strategy.workers", "1..65535"),
        (["bad host:1", "127.0.0.1:2001"], 0, "strategy.workers", "host:port"),
    ],
)
def test_bad_worker_lists_are_refused_naming_the_key(workers, index, key, expected):
    cluster, problems = find_cluster(strategy(workers=workers, task_index=index), None, {})
    assert cluster is None
    assert any(p.key == key and __import__("re").search(expected, p.expected) for p in problems), problems


def test_every_problem_of_a_spec_at_once():
    with pytest.raises(ConfigError, match=r"(?s)2 problems.*listed twice.*task_index=5"):
        resolve(config("strategy=multi_worker", "strategy.workers=[h:1,h:1]", "strategy.task_index=5"), CPU_PLAIN)


def test_tf_config_with_a_chief_puts_it_first():
    tf_config = {"cluster": {"chief": ["c:1"], "worker": ["w:1", "w:2"]}, "task": {"type": "worker", "index": 1}}
    cluster, problems = find_cluster(strategy(), tf_config, {})
    assert problems == [] and cluster.workers == ("c:1", "w:1", "w:2") and cluster.index == 2
    assert cluster.task == ("worker", 1) and not cluster.is_chief


@pytest.mark.parametrize(
    ("tf_config", "match"),
    [
        ({"_invalid": "{not json"}, "valid JSON"),
        ({"cluster": {}, "task": {"index": 0}}, "a list of host:port"),
        ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 2}}, r"0\.\.1"),
        ({"cluster": {"worker": ["a:1"]}, "task": {"type": "evaluator", "index": 0}}, "evaluators"),
        ({"cluster": {"worker": ["a:1", "a:1"]}, "task": {"index": 0}}, "listed twice"),
    ],
)
def test_bad_tf_config_is_refused(tf_config, match):
    with pytest.raises(ConfigError, match=match):
        resolve(config("strategy=multi_worker"), replace(CPU_PLAIN, tf_config=tf_config))


SLURM = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "node[07-08]", "SLURM_TASKS_PER_NODE": "2(x2)"}


def test_slurm_environment_is_a_cluster_one_port_per_task_on_a_node():
    plan = resolve(config("strategy=multi_worker", "strategy.port=3000"), replace(CPU_PLAIN, slurm=SLURM))
    assert plan.cluster.workers == ["node07:3000", "node07:3001", "node08:3000", "node08:3001"]
    assert plan.cluster.task_index == 3 and plan.cluster.is_chief is False
    assert plan.strategy.replicas == 4 and "Slurm" in plan.cluster.reason("workers")


def test_slurm_task_counts_that_do_not_add_up_are_refused():
    with pytest.raises(ConfigError, match="SLURM_TASKS_PER_NODE"):
        resolve(config("strategy=multi_worker"), replace(CPU_PLAIN, slurm={**SLURM, "SLURM_NTASKS": "5"}))


def test_config_workers_win_over_tf_config_and_slurm():
    env = replace(CPU_PLAIN, slurm=SLURM, tf_config={"cluster": {"worker": ["x:1"]}, "task": {"index": 0}})
    plan = resolve(config("strategy=multi_worker", "strategy.workers=[a:1,b:1]"), env)
    assert plan.cluster.workers == ["a:1", "b:1"]


def test_no_cluster_at_all_names_every_way_to_give_one():
    with pytest.raises(ConfigError, match=r"(?s)TF_CONFIG.*local_workers=2"):
        resolve(config("strategy=multi_worker"), CPU_PLAIN)


def test_hostlists_and_task_counts_expand_as_slurm_writes_them():
    assert expand_hostlist("gpu[01-03,07],cpu1") == ["gpu01", "gpu02", "gpu03", "gpu07", "cpu1"]
    assert expand_hostlist("a1") == ["a1"]
    assert expand_counts("2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(ValueError):
        expand_hostlist("gpu[a-b]")


def test_ring_on_cpu_nccl_on_gpus_and_nccl_refused_without_gpus():
    two = ["strategy=multi_worker", "strategy.workers=[a:1,b:1]"]
    plan = resolve(config(*two), CPU_PLAIN)
    assert plan.cluster.communication == "ring" and "no GPU" in plan.cluster.reason("communication")
    assert resolve(config(*two), ONE_V100).cluster.communication == "nccl"
    with pytest.raises(ConfigError, match=r"strategy.communication='nccl'.*GPUs only"):
        resolve(config(*two, "strategy.communication=nccl"), CPU_PLAIN)


def test_local_workers_plan_the_job_without_a_cluster():
    plan = resolve(config("strategy=multi_worker", "strategy.local_workers=3"), CPU_PLAIN)
    assert plan.strategy.replicas == 3 and plan.strategy.local_workers == 3


def test_workers_compare_plans_and_configs_but_not_their_own_index():
    settings = {"optimizer": {"learning_rate": 0.1}, "strategy": {"task_index": 0, "kind": "multi_worker"}}
    chief = comparable({"lr": 0.1, "process.is_chief": True, "strategy.task_index": 0}, settings)
    other = comparable(
        {"lr": 0.2, "process.is_chief": False, "strategy.task_index": 1},
        {**settings, "optimizer": {"learning_rate": 0.2}, "strategy": {"task_index": 1, "kind": "multi_worker"}},
    )
    assert differences([chief, other]) == {"config.optimizer.learning_rate": [0.1, 0.2], "plan.lr": [0.1, 0.2]}
    assert differences([chief, chief]) == {}


def test_a_worker_that_cannot_read_the_chiefs_checkpoints_is_refused_naming_the_shared_directory():
    """A worker resumes from what it finds in checkpoint.directory: one that does not see the chief's checkpoints
    (not a shared filesystem) has no resume point, so the workers' Plans differ and the job is refused with the
    fix, instead of that worker training from scratch. (The rule; the two-process case is not run end to end.)"""
    settings = {"checkpoint": {"directory": "ckpt"}, "strategy": {"task_index": 0, "kind": "multi_worker"}}
    resumed = "epoch 2, step 0 (global step 90)"
    chief = comparable({"resume": resumed, "strategy": "multi_worker"}, settings)
    blind = comparable(
        {"strategy": "multi_worker"}, {**settings, "strategy": {"task_index": 1, "kind": "multi_worker"}}
    )
    differing = differences([chief, blind])
    assert differing == {"plan.resume": [resumed, "<missing>"]}
    refusal = ConfigError([disagreement(key, values) for key, values in differing.items()])
    (violation,) = refusal.violations
    assert violation.key == "plan.resume" and violation.value == resumed
    assert "worker 1 has '<missing>'" in violation.expected
    assert "checkpoint.directory must be a path every worker reads" in violation.fix
    assert disagreement("config.optimizer.learning_rate", [0.1, 0.2]).fix.startswith("start every worker")


def test_file_sharding_needs_a_file_per_worker_and_an_epoch_is_the_smallest_share():
    from launcher.plan.decisions import DataPlan
    from launcher.plan.sharding import decide_sharding

    def plan(workers, batch=64):
        hosts = ",".join(f"h:{1000 + i}" for i in range(workers))
        return resolve(
            config(
                "strategy=multi_worker", f"strategy.workers=[{hosts}]", "scaling=global", f"scaling.batch_size={batch}"
            ),
            CPU_PLAIN,
        )

    # Shares 600 and 300 examples; a step takes 32 of each: 300 // 64 global batches x 2 workers = 8 steps.
    two, covered = decide_sharding(plan(2), (300, 200, 300, 100), 900)
    data = two.record(DataPlan)
    assert covered == 8 * 64 and two.file_sharded
    assert data.sharding == "file" and "shares [600, 300]" in data.reason("sharding")
    three, covered = decide_sharding(plan(3, batch=66), (300, 200), 500)
    data = three.record(DataPlan)
    assert covered == 500 and not three.file_sharded
    assert data.sharding == "data" and "2 training file(s) < 3 workers" in data.reason("sharding")
    arrays, covered = decide_sharding(plan(2), (), 900)
    assert covered == 900 and "arrays in memory" in arrays.record(DataPlan).reason("sharding")
    assert arrays.record(DataPlan).resume is None
    single, covered = decide_sharding(resolve(config("strategy=mirrored"), CPU_PLAIN), (10, 10), 20)
    assert covered == 20 and single.record(DataPlan).resume == "exact (skips)"
    assert single.record(DataPlan).sharding is None and not single.file_sharded


def test_tfrecord_without_shards_or_spec_is_refused_with_the_converter_command(tmp_path):
    from launcher.train.registry import DATASETS

    cfg = config("dataset=tfrecord", f"dataset.train={tmp_path}/none-*.tfrecord").dataset
    with pytest.raises(ConfigError, match=r"(?s)dataset.train=.*no file matches.*to_tfrecord"):
        DATASETS.get("tfrecord").load(cfg)
    (tmp_path / "train-0.tfrecord").write_bytes(b"")
    (tmp_path / "val-0.tfrecord").write_bytes(b"")
    cfg = config("dataset=tfrecord", f"dataset.train={tmp_path}/train-*.tfrecord").dataset
    with pytest.raises(
        ConfigError,
        match=r"dataset.features=\{\}: expected a feature spec \(none given and no "
        r"dataset.json",
    ):
        DATASETS.get("tfrecord").load(cfg)


def test_a_non_chief_worker_runs_in_its_own_folder_with_the_chiefs_checkpoint_directory(monkeypatch, tmp_path):
    from launcher.launch.train_mode import worker_run_dir

    monkeypatch.delenv("TF_CONFIG", raising=False)
    for key, value in SLURM.items():
        monkeypatch.setenv(key, value)
    cfg = compose("strategy=multi_worker")
    assert worker_run_dir(cfg, tmp_path) == tmp_path / "workers" / "worker3"
    assert cfg.checkpoint.directory == str(tmp_path / "checkpoints")
    monkeypatch.setenv("SLURM_PROCID", "0")
    chief = compose("strategy=multi_worker")
    assert worker_run_dir(chief, tmp_path) == tmp_path and chief.checkpoint.directory == ""
