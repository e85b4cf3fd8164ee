"""The finish step, after the last epoch: exports, the workers' final weights compared, the test split
(train.test_at_end), the Done block (`launcher.launch.done`)."""

from __future__ import annotations

from pathlib import Path

from launcher.contract import FitResult
from launcher.export.trained import ExportFailed, export_trained
from launcher.launch.agree import final_weights_agree
from launcher.launch.context import LaunchContext
from launcher.launch.done import DoneFacts, done_lines


def finish(context: LaunchContext, result: FitResult, engine, best, curves: Path | None = None) -> str | None:
    """Export the model (and the best one) to the run dir and MLflow, check the workers' weights agree, test the
    model (train.test_at_end) and print the Done block (with the run's `curves`). Returns the final weights' digest
    (multi-worker)."""
    plan, built, tracker = context.plan, context.built, context.tracker
    exported = best.exported if best else None
    exports = export_trained(
        context.config, plan, built, context.source, tracker, context.run_dir, exported, context.prepared.remote
    )
    digest = final_weights_agree(context.agreement, built.model, tracker)
    tested = evaluate_test_split(plan, engine, tracker, best, context.checkpointer)
    chief = plan.is_chief
    facts = DoneFacts(
        run_dir=context.run_dir,
        tracking_hint=tracker.ui_hint if chief else "logged by the chief (worker 0)",
        final={**result.final, **tested},
        metrics=[m.name for m in built.task.train_metrics],
        tested=list(tested),
        best=dict(best.best) if best and chief else {},
        best_file=_best_file(best, context) if chief else None,
        exported=exports.written,
        curves=curves,
        run_id=tracker.run_id if chief else None,
        tracking_uri=tracker.uri,
        mlflow_model=exports.mlflow_model,
        stopped_early=result.stopped_early,
        nothing_trained=not result.epochs,
    )
    print("\n".join(done_lines(facts)))
    if exports.failed:  # after what every worker does together (the weights compared, the test split) and the summary
        raise ExportFailed(exports.failed)
    return digest


def _best_file(best, context: LaunchContext) -> Path | None:
    """Where the best epoch's model is: best.keras (this launch's, or an earlier launch's when it trained nothing
    better), else the best/ checkpoint."""
    if best is None or not best.best:
        return None
    earlier = context.run_dir / "best.keras"
    if best.exported or earlier.is_file():
        return best.exported or earlier
    checkpointer = context.checkpointer
    latest = checkpointer.best_manager.latest_checkpoint if checkpointer else None
    return Path(latest) if latest else None


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
