"""Multi-worker agreement at the launch's two ends: the same Plan on every worker before anything is tracked,
the same final weights after training (`launcher.train.agreement` holds the collectives)."""

from __future__ import annotations

import json

from launcher.config.errors import ConfigError
from launcher.train.agreement import Agreement, comparable, differences, disagreement, weights_digest


def agree_on_plan(plan, settings: dict, strategy) -> Agreement | None:
    """Every worker must have resolved the same Plan from the same config (and resume from the same step); any
    difference stops every worker, naming the keys. None for a single-worker launch."""
    if plan.cluster is None:
        return None
    agreement = Agreement(strategy, len(plan.cluster.workers))
    mine = comparable(plan.values(), settings)
    payloads = [json.loads(text) for text in agreement.gather_text(json.dumps(mine, default=str))]
    differing = differences(payloads)
    if differing:
        raise ConfigError([disagreement(key, values) for key, values in list(differing.items())[:20]])
    print(f"  workers  {len(payloads)} worker(s) resolved the same Plan", flush=True)
    return agreement


def final_weights_agree(agreement: Agreement | None, model, tracker) -> str | None:
    """The final weights' digest, which must be the same on every worker, or the run fails (None: one worker)."""
    if agreement is None:
        return None
    digest = weights_digest(model.get_weights())
    digests = agreement.gather_text(digest)
    identical = len(set(digests)) == 1
    tracker.set_tags({"multi_worker.weights_identical": str(identical).lower()})
    if not identical:
        raise RuntimeError(
            "workers ended with different weights: "
            + ", ".join(f"worker {rank} sha256 {d[:12]}" for rank, d in enumerate(digests))
        )
    print(f"  final weights identical on {len(digests)} workers (sha256 {digest[:12]})", flush=True)
    return digest
