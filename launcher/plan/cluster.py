"""Which cluster a multi-worker process belongs to, and whether that cluster can work (pure: no TensorFlow).

A cluster is named three ways, first match wins:

1. `strategy.workers=[host:port, ...]` with `strategy.task_index` (the local launcher sets these);
2. `TF_CONFIG` (as Kubernetes operators and hand-written scripts set it);
3. Slurm's environment (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_JOB_NODELIST`, `SLURM_TASKS_PER_NODE`),
   each task listening on `strategy.port` + its rank on the node.

Every problem (malformed address, duplicate address, index out of range) is a `Violation`, so a bad
spec is refused before any process waits for a peer that cannot come. Only a strategy whose cluster form is
multi-worker (`launcher.config.strategies`) has a cluster; a single-process one has none to find.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.config.errors import Violation
from launcher.config.strategies import ClusterForm, strategy_of

EXAMPLE_TF_CONFIG = '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, "task": {"type": "worker", "index": 0}}'


@dataclass(frozen=True)
class Cluster:
    """The job's workers in rank order (chief first when TF_CONFIG names one) and this process's rank."""

    workers: tuple[str, ...]
    index: int
    source: str
    chief_is_separate: bool = False  # TF_CONFIG with a `chief` task: workers are indexed after it

    @property
    def is_chief(self) -> bool:
        return self.index == 0

    @property
    def task(self) -> tuple[str, int]:
        """(task type, task id) as TensorFlow's cluster resolver names this process."""
        if self.chief_is_separate:
            return ("chief", 0) if self.index == 0 else ("worker", self.index - 1)
        return "worker", self.index


def find_cluster(strategy, tf_config: dict | None, slurm: dict[str, str]) -> tuple[Cluster | None, list[Violation]]:
    """The cluster this process is part of, or None with the violations that say why not (None and none for a
    single-process strategy)."""
    entry = strategy_of(strategy.kind)
    if entry.cluster is ClusterForm.single_process:
        return None, []
    if list(strategy.workers):
        return _from_config(strategy)
    if tf_config is not None:
        return _from_tf_config(tf_config)
    if "SLURM_PROCID" in slurm and "SLURM_NTASKS" in slurm:
        return _from_slurm(slurm, int(strategy.port))
    return None, [
        Violation(
            "strategy",
            entry.name,
            "a cluster: strategy.workers=[host:port,...] with strategy.task_index, a TF_CONFIG environment variable, "
            "a Slurm job step (srun), or strategy.local_workers=N to start N workers on this machine (found none)",
            "python -m launcher strategy=multi_worker strategy.local_workers=2, or "
            f"export TF_CONFIG='{EXAMPLE_TF_CONFIG}' on every worker",
        )
    ]


def _from_config(strategy) -> tuple[Cluster | None, list[Violation]]:
    workers = tuple(str(w).strip() for w in strategy.workers)
    problems = address_problems("strategy.workers", workers)
    index = int(strategy.task_index)
    if not 0 <= index < len(workers):
        problems.append(
            Violation(
                "strategy.task_index",
                index,
                f"this worker's position in strategy.workers, 0..{len(workers) - 1}",
                f"strategy.task_index=0 on {workers[0]}, 1 on the next worker, and so on",
            )
        )
    return (None if problems else Cluster(workers, index, "strategy.workers")), problems


def _from_tf_config(tf_config: dict) -> tuple[Cluster | None, list[Violation]]:
    fix = f"export TF_CONFIG='{EXAMPLE_TF_CONFIG}' (the same cluster on every worker, its own task.index on each)"
    if "_invalid" in tf_config or not isinstance(tf_config, dict):
        return None, [Violation("TF_CONFIG", str(tf_config.get("_invalid", tf_config))[:120], "valid JSON", fix)]
    cluster = tf_config.get("cluster") if isinstance(tf_config.get("cluster"), dict) else {}
    task = tf_config.get("task") if isinstance(tf_config.get("task"), dict) else {}
    chiefs, workers = list(cluster.get("chief") or []), list(cluster.get("worker") or [])
    if not workers and not chiefs:
        return None, [Violation("TF_CONFIG.cluster.worker", cluster.get("worker"), "a list of host:port", fix)]
    kind, raw_index = task.get("type", "worker"), task.get("index")
    problems = address_problems("TF_CONFIG.cluster", tuple(chiefs + workers))
    if len(chiefs) > 1:
        problems.append(Violation("TF_CONFIG.cluster.chief", chiefs, "at most one chief", fix))
    members = {"chief": chiefs, "worker": workers}
    if kind not in members:
        problems.append(Violation("TF_CONFIG.task.type", kind, "worker or chief (evaluators are not supported)", fix))
    elif not isinstance(raw_index, int) or not 0 <= raw_index < len(members[kind]):
        problems.append(
            Violation(
                "TF_CONFIG.task.index",
                raw_index,
                f"an integer in 0..{len(members[kind]) - 1} (the cluster has {len(members[kind])} {kind} task(s))",
                fix,
            )
        )
    if problems:
        return None, problems
    index = raw_index if kind == "chief" else raw_index + len(chiefs)
    return Cluster(tuple(chiefs + workers), index, "TF_CONFIG", chief_is_separate=bool(chiefs)), []


def _from_slurm(slurm: dict[str, str], port: int) -> tuple[Cluster | None, list[Violation]]:
    nodelist = slurm.get("SLURM_STEP_NODELIST") or slurm.get("SLURM_JOB_NODELIST", "")
    per_node = slurm.get("SLURM_STEP_TASKS_PER_NODE") or slurm.get("SLURM_TASKS_PER_NODE", "1")
    fix = "run the workers with srun inside an sbatch allocation (one task per worker), or set strategy.workers"
    try:
        hosts, counts = expand_hostlist(nodelist), expand_counts(per_node)
        rank, ntasks = int(slurm["SLURM_PROCID"]), int(slurm["SLURM_NTASKS"])
    except ValueError as err:
        return None, [Violation("SLURM_JOB_NODELIST", nodelist, f"a Slurm node list and task counts ({err})", fix)]
    if len(counts) == 1 and len(hosts) > 1:
        counts = counts * len(hosts)
    if len(counts) != len(hosts) or sum(counts) != ntasks:
        return None, [
            Violation(
                "SLURM_TASKS_PER_NODE",
                per_node,
                f"task counts for the {len(hosts)} node(s) {hosts} adding up to SLURM_NTASKS={ntasks}",
                fix,
            )
        ]
    workers = tuple(
        f"{host}:{port + local}" for host, count in zip(hosts, counts, strict=True) for local in range(count)
    )
    if not 0 <= rank < len(workers):
        return None, [Violation("SLURM_PROCID", rank, f"0..{len(workers) - 1}", fix)]
    return Cluster(workers, rank, "Slurm"), []


ADDRESS = re.compile(r"^(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):(?P<port>\d{1,5})$")


def address_problems(key: str, addresses: tuple[str, ...]) -> list[Violation]:
    """Malformed host:port entries and addresses listed twice (two workers cannot share a port)."""
    problems = []
    for address in addresses:
        match = ADDRESS.match(address)
        if not match or not 1 <= int(match["port"]) <= 65535:
            problems.append(
                Violation(
                    key,
                    address,
                    "host:port with a port in 1..65535, e.g. 10.0.0.2:12345",
                    f"write it as host:port, e.g. {key}=[10.0.0.1:12345,10.0.0.2:12345]",
                )
            )
    seen: set[str] = set()
    for address in addresses:
        if address in seen:
            problems.append(
                Violation(
                    key,
                    address,
                    "every worker at its own host:port (listed twice)",
                    "give each worker on the same host a different port",
                )
            )
        seen.add(address)
    return problems


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed node list: `gpu[01-03,07],cpu1` -> gpu01 gpu02 gpu03 gpu07 cpu1."""
    hosts = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text.strip()):
        match = re.fullmatch(r"(?P<prefix>[^\[]*)\[(?P<ranges>[^\]]+)\](?P<suffix>.*)", part)
        if not match:
            hosts.append(part)
            continue
        for item in match["ranges"].split(","):
            low, _, high = item.partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                raise ValueError(f"cannot read the range {item!r}")
            for number in range(int(low), int(high or low) + 1):
                hosts.append(f"{match['prefix']}{number:0{len(low)}d}{match['suffix']}")
    if not hosts:
        raise ValueError("empty node list")
    return hosts


def expand_counts(text: str) -> list[int]:
    """Slurm's tasks per node: `2(x3),1` -> [2, 2, 2, 1]."""
    counts = []
    for item in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if not match:
            raise ValueError(f"cannot read the task count {item!r}")
        counts += [int(match[1])] * int(match[2] or 1)
    return counts
