"""How a checkpoint's position maps onto this launch: the Plan's `resume` decision.

Pure: given where the checkpoint stopped and the layout (strategy, replicas, global batch) it
was written with and the one this launch runs with, say where training continues and why.
Resuming under another strategy or replica count is allowed; with another global batch the
data position inside the epoch is rounded down to whole batches and the run is no longer
step-for-step identical to an uninterrupted one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from launcher.contract import Position


@dataclass(frozen=True)
class ResumeDecision:
    position: Position
    value: str
    reason: str
    warning: str | None = None


def layout_of(plan) -> dict:
    """What a checkpoint records about how it was trained."""
    return {"strategy": plan.strategy.kind, "replicas": plan.strategy.replicas, "global_batch": plan.batch.global_batch}


def decide_resume(position: Position, previous: dict | None, layout: dict) -> ResumeDecision:
    """Where to continue from `position` (as saved) when the checkpoint's layout was `previous`."""
    where = str(position)
    if not previous or previous == layout:
        return ResumeDecision(position, where, "checkpoint written with the same strategy, replicas and global batch")
    before = ", ".join(f"{k}={previous.get(k)}" for k in layout)
    now = ", ".join(f"{k}={v}" for k, v in layout.items())
    reason = f"allowed: checkpoint written with {before}; now {now}. Weights and optimizer state carry over"
    if previous.get("global_batch") == layout["global_batch"] or not position.step_in_epoch:
        return ResumeDecision(position, where, reason)
    examples = position.step_in_epoch * previous["global_batch"]
    moved = replace(position, step_in_epoch=examples // layout["global_batch"])
    reason += (
        f"; the data position ({examples} examples into the epoch) is rounded down to "
        f"{moved.step_in_epoch} whole batches of {layout['global_batch']}"
    )
    warning = "Resumed with a different global batch: the run is not step-for-step identical to an uninterrupted one."
    return ResumeDecision(moved, where, reason, warning)
