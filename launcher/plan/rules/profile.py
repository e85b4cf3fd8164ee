"""The profiler's trace window, when one is asked for."""

from __future__ import annotations

from launcher.config.schema import Config
from launcher.plan.decisions import ClusterPlan, ProfilePlan


def decide_profile(config: Config, cluster: ClusterPlan | None) -> ProfilePlan:
    profile = config.train.profile
    if profile.steps <= 0 or profile.skip_steps < 0:
        return ProfilePlan.of()
    chief = "" if cluster is None or cluster.is_chief else " (chief only: this worker does not trace)"
    return ProfilePlan.of(
        window=(
            f"steps {profile.skip_steps + 1}-{profile.skip_steps + profile.steps}",
            "requested: TensorFlow profiler trace + op table in <run dir>/profile, logged to MLflow; "
            f"the window is rounded to step-execution boundaries{chief}",
        )
    )
