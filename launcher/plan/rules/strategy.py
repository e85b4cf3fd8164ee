"""Which tf.distribute strategy, on which devices, and (multi-worker) the cluster this process joins.

What each strategy is comes from its entry in `launcher.config.strategies`: its placement picks the devices here,
its cluster form says whether this process looks for a cluster, and how its workers start says whether
`strategy.local_workers` is planned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from launcher.config.schema import Config
from launcher.config.strategies import Placement, Strategy, WorkerStart, strategy_of
from launcher.plan.cluster import Cluster, find_cluster
from launcher.plan.decisions import ClusterPlan, StrategyPlan
from launcher.plan.environment import Environment
from launcher.plan.rules.findings import Findings

DEFAULT_LOGICAL_CPUS = 2
NO_SPLIT = (0, "no CPU split needed")


@dataclass(frozen=True)
class Placed:
    """A placement's decisions (value, reason): the devices, the CPU split, and the replicas in this process."""

    devices: tuple[list[str], str]
    logical_cpus: tuple[int, str]
    replicas: tuple[int, str]


def decide_strategy(config: Config, env: Environment, found: Findings) -> tuple[StrategyPlan, ClusterPlan | None]:
    entry = strategy_of(config.strategy.kind)
    placed = PLACEMENTS[entry.placement](config, env, found)
    kind = (entry.name, f"requested: {entry.description}")
    if entry.single_process:
        plan = StrategyPlan.of(
            kind=kind, devices=placed.devices, logical_cpus=placed.logical_cpus, replicas=placed.replicas
        )
        cluster = None
    else:
        plan, cluster = _in_cluster(config, env, found, entry, kind, placed)
    if config.strategy.slurm_requeue:
        value, reason = _slurm_requeue(config, env, found)
        plan = replace(plan, slurm_requeue=value, why={**plan.why, "slurm_requeue": reason})
    return plan, cluster


def _slurm_requeue(config: Config, env: Environment, found: Findings) -> tuple[str, str]:
    """What SIGUSR1 does under Slurm: save, then requeue this job (only when Slurm runs this process)."""
    job = env.slurm.get("SLURM_JOB_ID")  # an array task has its own, which scontrol requeue takes
    if not job:
        found.warn("strategy.slurm_requeue=true outside a Slurm job (no SLURM_JOB_ID): nothing to requeue")
        return "off", "requested, but this process does not run under Slurm (no SLURM_JOB_ID)"
    if not config.name:
        found.warn(
            "strategy.slurm_requeue=true without name=: the requeued job resumes only if it finds this run dir "
            "again (name=<run> or a fixed hydra.run.dir)"
        )
    return (
        f"SIGUSR1: save, then scontrol requeue {job}",
        "strategy.slurm_requeue=true under Slurm (sbatch --signal=USR1@<seconds> --requeue): the time-limit "
        "warning saves a checkpoint and puts the job back in the queue; it resumes from that checkpoint",
    )


def _first_device(config: Config, env: Environment, found: Findings) -> Placed:
    device = "/gpu:0" if env.gpus else "/cpu:0"
    return Placed(
        devices=([device], f"found {env.describe_devices()}"), logical_cpus=NO_SPLIT, replicas=(1, "one device")
    )


def _chosen_device(config: Config, env: Environment, found: Findings) -> Placed:
    wanted = config.strategy.device.strip().lower()
    if wanted == "auto":
        device = "/gpu:0" if env.gpus else "/cpu:0"
        reason = f"device=auto picked {device}; found {env.describe_devices()}"
    else:
        device, reason = wanted, "requested"
        problem = _device_problem(wanted, env)
        if problem:
            valid = ["auto", "/cpu:0", *(f"/gpu:{i}" for i in range(len(env.gpus)))]
            found.refuse(
                "strategy.device",
                config.strategy.device,
                f"one of {valid} ({problem}; found {env.describe_devices()})",
                "strategy.device=auto",
            )
    return Placed(devices=([device], reason), logical_cpus=NO_SPLIT, replicas=(1, "one device"))


def _device_problem(device: str, env: Environment) -> str | None:
    kind, _, index = device.lstrip("/").partition(":")
    if kind not in ("cpu", "gpu") or not index.isdigit():
        return "not a device string"
    if kind == "gpu" and int(index) >= len(env.gpus):
        return f"there is no GPU {index}"
    if kind == "cpu" and int(index) != 0:
        return "only /cpu:0 exists"
    return None


def _local_devices(config: Config, env: Environment, found: Findings) -> Placed:
    wanted = max(config.strategy.devices, 0)  # a negative count is reported by the bounds table
    if env.gpus:
        if wanted > len(env.gpus):
            found.refuse(
                "strategy.devices",
                wanted,
                f"at most {len(env.gpus)} (found {env.describe_devices()})",
                f"strategy.devices={len(env.gpus)} or strategy.devices=0 for all GPUs",
            )
        count = wanted or len(env.gpus)
        devices = ([f"/gpu:{i}" for i in range(count)], f"found {env.describe_devices()}")
        logical = (0, "GPUs are the replicas")
        if count == 1:
            found.warn("strategy=mirrored with 1 GPU runs a single replica; it adds overhead and no speed.")
    else:
        count = wanted or DEFAULT_LOGICAL_CPUS
        devices = (
            [f"/cpu:{i}" for i in range(count)],
            f"adapted: {env.describe_devices()}, so the CPU is split into {count} logical devices "
            "(the same mirrored code path, exercised on CPU)",
        )
        logical = (count, "configured before the TF runtime starts")
        if count > env.cpu_count:
            found.warn(f"{count} logical CPU devices on {env.cpu_count} cores: replicas share cores.")
    return Placed(devices=devices, logical_cpus=logical, replicas=(max(count, 1), f"{count} mirrored device(s)"))


def _every_device_per_worker(config: Config, env: Environment, found: Findings) -> Placed:
    local = max(len(env.gpus), 1)
    device = "/gpu" if env.gpus else "/cpu"
    return Placed(
        devices=([f"{device}:{i}" for i in range(local)], f"per worker; found {env.describe_devices()}"),
        logical_cpus=(0, "one CPU device per worker"),
        replicas=(local, f"{local} device(s) per worker"),
    )


PLACEMENTS: dict[Placement, Callable[[Config, Environment, Findings], Placed]] = {
    Placement.first_device: _first_device,
    Placement.chosen_device: _chosen_device,
    Placement.local_devices: _local_devices,
    Placement.every_device_per_worker: _every_device_per_worker,
}


def _in_cluster(
    config: Config, env: Environment, found: Findings, entry: Strategy, kind: tuple[str, str], placed: Placed
) -> tuple[StrategyPlan, ClusterPlan]:
    strategy = config.strategy
    local_workers = None
    if entry.workers is WorkerStart.per_worker and strategy.local_workers:
        # This process only starts and watches the workers; each of them resolves its own Plan.
        workers = [f"127.0.0.1:<free port {i}>" for i in range(strategy.local_workers)]
        local_workers = (
            strategy.local_workers,
            "started on this machine, each a process of its own on a free 127.0.0.1 port",
        )
        cluster = Cluster(tuple(workers), 0, "strategy.local_workers")
    else:
        cluster, problems = find_cluster(strategy, env.tf_config, env.slurm)
        found.violations.extend(problems)
        cluster = cluster or Cluster(("localhost:0",), 0, "none")
    local = placed.replicas[0]
    plan = StrategyPlan.of(
        kind=kind,
        local_workers=local_workers,
        devices=placed.devices,
        logical_cpus=placed.logical_cpus,
        replicas=(len(cluster.workers) * local, f"{len(cluster.workers)} worker(s) x {local} device(s)"),
    )
    chief = (
        "this worker logs to MLflow, exports the model and writes the checkpoints"
        if cluster.is_chief
        else "not the chief: trains, saves into a temporary directory removed after each save, resumes from "
        "the chief's checkpoints; leaves MLflow and export to the chief"
    )
    return plan, ClusterPlan.of(
        workers=(list(cluster.workers), f"from {cluster.source}"),
        task_index=(cluster.index, f"this worker is {cluster.task[0]} {cluster.task[1]}"),
        is_chief=(cluster.is_chief, chief),
        communication=_communication(strategy, env, found),
        connect_timeout=(
            float(strategy.connect_timeout),
            "seconds this worker waits for its peers at start-up before stopping with their addresses",
        ),
    )


def _communication(strategy, env: Environment, found: Findings) -> tuple[str, str]:
    wanted = strategy.communication.value
    if wanted == "nccl" and not env.gpus:
        found.refuse(
            "strategy.communication",
            "nccl",
            "ring or auto on a machine without GPUs (NCCL runs on GPUs only)",
            "strategy.communication=auto",
        )
    if wanted != "auto":
        return wanted, "requested"
    if env.gpus:
        return "nccl", "auto: GPUs all-reduce fastest through NCCL"
    return "ring", "auto: no GPU, so gradients are all-reduced over gRPC by TensorFlow's ring collectives"
