"""The distribution strategies the launcher knows, each saying what it is: the resolver, the runtime and the
launchers ask this table instead of comparing names.

Adding a strategy is one entry here (and its `conf/strategy/<name>.yaml`; the schema's `StrategyKind` is made from
this table): which devices it places replicas on, the name of its builder in `launcher.train.runtime.BUILDERS`
(TensorFlow objects are made there, never here), whether it runs as one process or as a cluster of workers, and
how those workers start.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Placement(Enum):
    """Which devices a strategy's replicas run on (`launcher.plan.rules.strategy` decides them)."""

    first_device = "first_device"
    """One replica on the first GPU, else the CPU; nothing to choose."""
    chosen_device = "chosen_device"
    """One replica on `strategy.device` (auto: the first GPU, else the CPU); a device that is not there is refused."""
    local_devices = "local_devices"
    """`strategy.devices` replicas (0: every GPU) on this machine's GPUs, else on that many logical CPU devices."""
    every_device_per_worker = "every_device_per_worker"
    """On each worker: every GPU it has, else its CPU (one replica)."""


class ClusterForm(Enum):
    """How many processes train together (`launcher.plan.cluster` reads it)."""

    single_process = "single_process"
    """This process alone: no cluster, no peers to agree with."""
    multi_worker = "multi_worker"
    """A cluster of workers named by `strategy.workers` + `strategy.task_index`, `TF_CONFIG` or Slurm; one chief."""


class WorkerStart(Enum):
    """Who starts the processes that train (`launcher.supervise.local_workers` reads it)."""

    in_process = "in_process"
    """The launching process trains."""
    per_worker = "per_worker"
    """One process per worker: `strategy.local_workers=N` starts N on this machine, else an outside launcher
    (srun, a Kubernetes operator, a person) starts each with the cluster spec."""


@dataclass(frozen=True)
class Strategy:
    """One strategy choice (`strategy=<name>`)."""

    name: str
    description: str
    """What it is, as the Plan's reason for choosing it says ("requested: <description>")."""
    placement: Placement
    builder: str
    """Its key in `launcher.train.runtime.BUILDERS`: the function that makes the tf.distribute object."""
    cluster: ClusterForm = ClusterForm.single_process
    workers: WorkerStart = WorkerStart.in_process

    @property
    def single_process(self) -> bool:
        """Trains in one process: it may measure this machine and run the doctor's trials (workers of a cluster
        must all decide alike, whatever each machine measures)."""
        return self.cluster is ClusterForm.single_process


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("default", "one device, no tf.distribute wrapping", Placement.first_device, "current"),
        Strategy("one_device", "OneDeviceStrategy", Placement.chosen_device, "one_device"),
        Strategy("mirrored", "MirroredStrategy (synchronous data parallel)", Placement.local_devices, "mirrored"),
        Strategy(
            "multi_worker",
            "MultiWorkerMirroredStrategy",
            Placement.every_device_per_worker,
            "multi_worker",
            ClusterForm.multi_worker,
            WorkerStart.per_worker,
        ),
    )
}


def strategy_of(kind) -> Strategy:
    """The entry for `strategy.kind` (a `StrategyKind`: the typed Config and the composed node both hold one)."""
    return STRATEGIES[kind.value]
