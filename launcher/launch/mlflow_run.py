"""Opening a launch's MLflow run: the checkpoint's run continued, or a new one with its params, tags, the Plan's
files and the data as dataset inputs; restart tags, system metrics and the TensorBoard mirror around it.

Beside `mlflow_record` (what MLflow's own views show) and `params` (what a run logs as params and tags).
"""

from __future__ import annotations

import os

from launcher.files import CONFIG_FILE, PLAN_FILE, TUNING_FILE
from launcher.launch.context import LaunchContext
from launcher.launch.faults import fault_point
from launcher.launch.mlflow_record import dataset_inputs
from launcher.launch.params import run_name, run_params, run_tags
from launcher.plan.continuation import changed_tags
from launcher.plan.decisions import ContinuationPlan, ResumePlan
from launcher.supervise.restarts import REASON_ENV, attempt_number
from launcher.tracking.succession import TRIAL_TAG
from launcher.tracking.tensorboard import TensorBoardMirror
from launcher.tracking.tracker import NullTracker, RunTracker, open_run
from launcher.tracking.uri import redact


def birth_tags(config) -> dict[str, str]:
    """Tags the run is created with, before anything else is logged: a search's trial number, so the sweeper that
    finds its trial abandoned can find (and fail) the run even if its process was killed a moment after making it."""
    trial = config.sweep.trial
    return {} if trial is None else {TRIAL_TAG: str(trial)}


def open_mlflow_run(context: LaunchContext) -> RunTracker:
    """The chief's MLflow run (a NullTracker elsewhere, or with tracking.enabled=false): the restored checkpoint's
    run continued, or a new one. A write MLflow refuses stops the launch here, before training."""
    config, plan, prepared, run_dir = context.config, context.plan, context.prepared, context.run_dir
    tr = config.tracking
    if not tr.enabled or not plan.is_chief:
        return NullTracker()
    name = run_name(config, context.choices)
    params = run_params(context.settings, plan)
    tracking_uri, init_source = prepared.tracking_uri, prepared.init_source
    tracker = open_run(
        tracking_uri,
        context.launch_dir,
        tr.experiment,
        name,
        resume_run_id=context.restored.sidecar.get("mlflow_run_id"),
        parent_run_id=tr.parent_run_id or None,
        run_dir=run_dir,
        outage_wait=tr.outage_wait,
        remember=True,
        params=params,
        tags=birth_tags(config),
    )
    if tracker.decision is not None:
        print(f"  mlflow   {tracker.decision.reason}", flush=True)
    fault_point("run_created", 0)
    tracker.deliver_spool()  # what an outage kept from an earlier launch in this run dir
    if tracking_uri != tr.uri:
        tracker.set_tags({"tracking.intended_uri": redact(tr.uri)})
    if init_source is not None and init_source.run_id and not tracker.resumed:
        tracker.set_tags({"init.source_run_id": init_source.run_id})
    if tracker.resumed:
        tracker.set_tags({"plan.resume": plan.record(ResumePlan).position})
        if plan.has(ContinuationPlan):  # MLflow keeps the first launch's params: the changes as tags
            continued = plan.record(ContinuationPlan)
            tracker.set_tags({**changed_tags(continued.changed or ""), "plan.resume.kept": continued.kept or ""})
    else:
        tracker.log_params(params)
        tracker.set_tags(run_tags(plan, prepared.env, run_dir, tr, name))
        tracker.log_artifact(run_dir / PLAN_FILE)
        tracker.log_artifact(run_dir / CONFIG_FILE)
        if (run_dir / TUNING_FILE).exists():
            tracker.log_artifact(run_dir / TUNING_FILE)
        tracker.log_inputs(dataset_inputs(prepared.source, config.dataset))
    if restart := attempt_number():  # train.max_restarts: the supervisor says why this process exists
        why = os.environ.get(REASON_ENV, "")
        tracker.set_tags({"restart.count": restart, f"restart.{restart}.error": why, "error": why})
    tracker.flush()  # a write MLflow refuses stops the launch here, before training
    if tr.system_metrics:
        tracker.start_system_metrics(tr.system_metrics_interval)
    if tr.tensorboard:
        tracker = TensorBoardMirror(tracker, run_dir, (run_dir / PLAN_FILE).read_text())
    return tracker
