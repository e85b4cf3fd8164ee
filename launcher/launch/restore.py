"""The restore step: resume from the run's checkpoints, the Plan saying where training continues.

Before tracking starts, so a checkpoint of another model is a ConfigError MLflow never sees.
"""

from __future__ import annotations

from launcher.config.models import architecture
from launcher.launch.checkpointer import Checkpointer, owner_problem, set_aside
from launcher.launch.context import LaunchContext, Restored
from launcher.launch.preflight import save_plan, show_plan
from launcher.plan.decisions import InitPlan, ResumePlan, render_records
from launcher.plan.resume import decide_resume, layout_of
from launcher.tracking.uri import redact


def restore(context: LaunchContext) -> Restored:
    """checkpoint.resume=never sets the old checkpoints aside; else the newest (or the named) one is restored,
    after pulling an object store's copy."""
    plan, built, run_dir, remote = context.plan, context.built, context.run_dir, context.prepared.remote
    directory, checkpoint = context.checkpoint_dir, context.config.checkpoint
    if not checkpoint.enabled:
        return Restored(plan)
    if str(checkpoint.resume) == "never" and plan.is_chief:
        set_aside(directory)
        if remote is not None and (aside := remote.set_aside()):
            print(f"WARNING: checkpoint.resume=never: remote checkpoints moved to {redact(aside)}", flush=True)
    elif remote is not None and (pulled := remote.pull(directory)):
        print(f"  remote   downloaded ckpt-{pulled[-1]} (and {len(pulled) - 1} older) from {redact(remote.url)}")
    if plan.is_chief and str(checkpoint.resume) != "never" and (taken := owner_problem(directory, run_dir)):
        raise taken
    if plan.is_chief:
        from launcher.train.adapt import save_adapted

        save_adapted(built.adapted, directory)  # model.adapt's layers, for a resumed run to read back
    checkpointer = Checkpointer(
        checkpoint, directory, built, architecture(context.settings["model"]), plan.worker_index, remote
    )
    restored = checkpointer.restore()
    if not restored:
        return Restored(plan, checkpointer)
    saved_position, sidecar = restored
    if plan.has(InitPlan):
        plan = plan.with_warning(
            "model.init_from: the run resumed from its own checkpoint, which replaced the source's weights"
        )
    decision = decide_resume(saved_position, checkpointer.previous_state().get("layout"), layout_of(plan))
    record = ResumePlan.of(position=(decision.value, decision.reason))
    plan = plan.with_record(record)
    if decision.warning:
        plan = plan.with_warning(decision.warning)
    show_plan(plan, render_records([record], "the checkpoint"))
    save_plan(plan, run_dir)
    return Restored(plan, checkpointer, decision.position, sidecar)
