"""The finish step, after the last epoch: exports, the workers' final weights compared, the test split
(train.test_at_end), the summary."""

from __future__ import annotations

from pathlib import Path

from launcher.console import readable
from launcher.contract import FitResult, headline
from launcher.export.trained import ExportFailed, export_trained
from launcher.launch.agree import final_weights_agree
from launcher.launch.context import LaunchContext


def finish(context: LaunchContext, result: FitResult, engine, best) -> str | None:
    """Export the model (and the best one) to the run dir and MLflow, check the workers' weights agree, test the
    model (train.test_at_end) and print the summary. Returns the final weights' digest (multi-worker)."""
    plan, built, tracker = context.plan, context.built, context.tracker
    exported = best.exported if best else None
    failed = export_trained(
        context.config, plan, built, context.source, tracker, context.run_dir, exported, context.prepared.remote
    )
    digest = final_weights_agree(context.agreement, built.model, tracker)
    tested = evaluate_test_split(plan, engine, tracker, best, context.checkpointer)
    hint = tracker.ui_hint if plan.is_chief else "logged by the chief (worker 0)"
    print_summary(result, context.run_dir, hint, [m.name for m in built.task.train_metrics], tested)
    if failed:  # after what every worker does together (the weights compared, the test split) and the summary
        raise ExportFailed(failed)
    return digest


def evaluate_test_split(plan, engine, tracker, best, checkpointer) -> dict[str, float]:
    """train.test_at_end: the best checkpoint's weights (else the final ones) evaluated once on the test split,
    after the final model is exported (so the exported model stays the final one)."""
    if plan.schedule.test_steps is None:
        return {}
    restored = checkpointer.best_manager.latest_checkpoint if checkpointer and best else None
    epoch = plan.schedule.epochs - 1
    if restored:
        checkpointer.checkpoint.restore(restored).expect_partial()
        epoch = int(best.best.get("epoch", epoch))
    metrics = engine.evaluate("test")
    tracker.log_metrics(metrics, step=epoch)
    tracker.set_tags({"test.model": f"best ({Path(restored).name}, epoch {epoch + 1})" if restored else "final"})
    tracker.flush()
    return metrics


def print_summary(
    result: FitResult, run_dir: Path, tracking_hint: str, metrics: list[str], tested: dict[str, float]
) -> None:
    final = {**result.final, **tested}
    if not result.epochs:
        print("\nNothing to train: the checkpoint already covers every epoch.")
    print("\nDone." + (" (stopped early)" if result.stopped_early else ""))
    for key in [*headline(metrics, ("examples_per_sec",)), *tested]:
        if key in final:
            print(f"  {key:<20} {readable(final[key])}")
    print(f"  {'run dir':<20} {run_dir}")
    print(f"  {'MLflow':<20} {tracking_hint}")
