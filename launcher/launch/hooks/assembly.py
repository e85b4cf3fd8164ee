"""The hook list of one fit: the hooks a config asks for, in the order their work must happen at an epoch end.

Adding a hook means a module in this folder and a line in `hooks_for`: the training launch only takes the list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from launcher.contract import FitResult, HookList
from launcher.launch.checkpoint_policy import SavePolicy
from launcher.launch.context import LaunchContext
from launcher.launch.faults import FaultHook
from launcher.launch.hooks.best_model import BestModelHook
from launcher.launch.hooks.budget import TimeBudgetHook
from launcher.launch.hooks.callback_state import CallbackStateHook
from launcher.launch.hooks.checkpoint import CheckpointHook
from launcher.launch.hooks.history import HistoryHook
from launcher.launch.hooks.metrics import MetricsHook
from launcher.launch.hooks.preemption import PreemptionHook, StopAgreementHook
from launcher.launch.hooks.profiling import ProfilerHook
from launcher.launch.hooks.pruning import PruningHook
from launcher.launch.hooks.step_metrics import StepMetricsHook
from launcher.launch.hooks.utilization import UtilizationHook
from launcher.launch.mfu import matmul_peak, process_age_seconds, training_flops_per_example
from launcher.launch.profiler import StepProfiler
from launcher.plan.decisions import FaultPlan


@dataclass
class FitHooks:
    """The ordered list the engine calls, and the hooks whose results the launch reads after the fit."""

    hooks: HookList
    metrics: MetricsHook  # after a resume: how many epochs of metrics it re-logged
    best: BestModelHook | None  # checkpoint.monitor (plan.task.best_by): the best epoch, its checkpoint and best.keras
    pruning: PruningHook | None  # an hparams_search trial on the chief
    history: HistoryHook = field(default_factory=HistoryHook)  # every epoch's logs (a resumed run's too): the curves

    def stop_reason(self, result: FitResult, schedule) -> str:
        """Why training ended: its trial was pruned, early stopping, train.max_steps, or its epochs."""
        if self.pruning is not None and self.pruning.pruned_at is not None:
            return "pruned"
        if result.stopped_early:
            return "early_stopping"
        return "max_steps" if schedule.max_steps is not None else "epochs"

    def stop_tags(self, result: FitResult, schedule) -> dict[str, str]:
        """`stop_reason`, and where a pruned trial stopped."""
        pruned = self.pruning.tags(schedule.total_steps) if self.pruning is not None else {}
        return {"stop_reason": self.stop_reason(result, schedule), **pruned}


def hooks_for(context: LaunchContext, guard) -> FitHooks:
    """One hook per job: stops first (time budget, the workers' agreement, a test's fault), then what measures,
    what keeps state for a resume, the save, and last what logs and what raises the stop."""
    config, plan, built, tracker, run_dir = (
        context.config,
        context.plan,
        context.built,
        context.tracker,
        context.run_dir,
    )
    checkpointer, agreement, trial = context.checkpointer, context.agreement, context.prepared.trial
    checkpoint, schedule = config.checkpoint, plan.schedule
    history, callback_state = HistoryHook(), CallbackStateHook()
    metrics = MetricsHook(tracker, val_by_step=schedule.val_every_steps is not None)
    best = None
    if plan.task.best_by:
        export = run_dir / "best.keras" if checkpoint.export_model and plan.is_chief else None
        best = BestModelHook(plan.task.best_by, plan.task.best_mode, checkpointer, built.model, export)
    stateful = HookList(h for h in (history, best, callback_state, metrics) if h is not None)
    stop_agreement = None
    if agreement is not None:
        guard.agree = agreement.any_stop
        stop_agreement = StopAgreementHook(guard)
    budget = schedule.max_time_seconds
    pruning = PruningHook(trial, schedule.val_every_steps is not None) if trial is not None and plan.is_chief else None
    hooks = [
        TimeBudgetHook(budget, guard) if budget else None,
        stop_agreement,
        FaultHook() if plan.has(FaultPlan) else None,
        _utilization_hook(config, plan, built.model, tracker, context.prepared.env),
        _profiler_hook(config, plan, tracker, run_dir),
        history,
        best,
        callback_state,
        pruning,
        CheckpointHook(checkpointer, SavePolicy.from_config(checkpoint), guard, schedule.steps_in_epoch, stateful)
        if checkpointer
        else None,
        _step_metrics_hook(config, built, tracker),
        metrics,
        PreemptionHook(guard, schedule.steps_in_epoch),
    ]
    return FitHooks(HookList(h for h in hooks if h is not None), metrics, best, pruning, history)


def _utilization_hook(config, plan, model, tracker, env) -> UtilizationHook:
    """Model FLOPs utilisation from the training FLOPs per example and this machine's matmul peak for the
    compute dtype (both 0 when not measured)."""
    flops = training_flops_per_example(model) if config.train.measure_utilization else 0.0
    if not flops:
        return UtilizationHook(0.0, 0.0, process_age_seconds)
    dtype = plan.precision.compute_dtype
    peak = matmul_peak(dtype, env.matmul_gflops)  # the probe's rates: no second cache read
    if not tracker.resumed:  # measurements, not settings: tags, so runs differ in params only by their config
        tracker.set_tags(
            {
                "measured.train_flops_per_example": int(flops),
                f"measured.matmul_peak_{dtype}_gflops": round(peak / 1e9, 1),
            }
        )
    return UtilizationHook(flops, peak, process_age_seconds)


def _step_metrics_hook(config, built, tracker) -> StepMetricsHook | None:
    every = config.tracking.step_metrics_every
    if every <= 0 or not config.tracking.enabled:
        return None
    from launcher.train.engine import optimizer_logs

    optimizer = built.optimizer
    return StepMetricsHook(tracker, every, lambda: optimizer_logs(optimizer))


def _profiler_hook(config, plan, tracker, run_dir: Path) -> ProfilerHook | None:
    profile = config.train.profile
    if profile.steps <= 0:
        return None
    # Only the chief traces; every worker cuts its step chunks at the same window boundaries.
    profiler = StepProfiler(run_dir / "profile", profile.skip_steps, profile.steps, trace=plan.is_chief)
    return ProfilerHook(profiler, tracker)
