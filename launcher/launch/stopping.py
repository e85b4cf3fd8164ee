"""What may stop a fit before its end: signals (and the Slurm requeue warning), the numerics guard, and the
context each stop's `Ending` needs (`launcher.contract.ending_of`)."""

from __future__ import annotations

from dataclasses import replace

from launcher.config.durations import show_duration
from launcher.contract import Ending, StopContext
from launcher.launch.hooks.preemption import PreemptionGuard
from launcher.supervise.restarts import supervised
from launcher.supervise.slurm import REQUEUE_SIGNAL, requeue
from launcher.train.numerics import NumericsGuard


def preemption_guard(config, plan) -> PreemptionGuard:
    """SIGTERM / SIGINT (and, with strategy.slurm_requeue, SIGUSR1) turned into a save and a stop. Started by a
    supervisor or a local-workers launch, the process acts on the first only: that parent escalates."""
    requeues = plan.strategy.requeues
    extra = (REQUEUE_SIGNAL,) if requeues else ()
    return PreemptionGuard(config.checkpoint.save_on_preemption or requeues, extra, escalates=not supervised())


def stop_context(plan) -> StopContext:
    """The chief of a requeueing job requeues on Slurm's signal; train.max_time as the console shows it."""
    requeues = plan.strategy.requeues and plan.is_chief
    budget = plan.schedule.max_time_seconds
    return StopContext(REQUEUE_SIGNAL if requeues else None, show_duration(budget) if budget else "")


def requeue_job(ending: Ending) -> Ending:
    """Last, after the MLflow run is ended: Slurm stops this job as it requeues it. The ending, with why the
    requeue failed when it did."""
    done, said = requeue()
    print(said, flush=True)
    return ending if done else replace(ending, error=f"{ending.error}; {said}")


def numerics_guard(config, plan) -> NumericsGuard:
    """The engine's NumericsGuard from train.* and the Plan's loss scaling."""
    dynamic = plan.loss_scale.mode == "dynamic"
    return NumericsGuard(
        on_nonfinite=config.train.on_nonfinite.value,
        collapse_steps=config.train.collapse_steps,
        precision=plan.precision.name,
        min_scale=config.loss_scale.min_scale if dynamic else None,
    )
