"""How a multi-worker job splits its training data, decided from the shards' sizes (pure).

File-level sharding (worker i reads files i, i+W, i+2W, ...) reads every example once across the job;
it needs at least as many files as workers. Otherwise every worker reads every file and keeps its
slice of each global batch (data-level). Under file sharding the workers' shares differ when the files
do, and every worker must run the same number of steps, so an epoch is the smallest share in whole
global batches per worker, times the workers.
"""

from __future__ import annotations

from launcher.plan.decisions import Plan


def decide_sharding(plan: Plan, shards: tuple[int, ...], num_train: int) -> int:
    """Record the data decisions; returns the training examples one epoch covers."""
    if shards:
        plan.decide("data.resume", "exact (skips)",
                    f"streamed from {len(shards)} file(s) in a fixed order with a seeded shuffle: a resumed epoch "
                    "re-reads its first batches and skips them (exact, at the cost of reading them)")
    if plan.get("strategy") != "multi_worker":
        return num_train
    workers, global_batch = len(plan["strategy.cluster"]), plan["batch.global"]
    if len(shards) < workers:
        why = "arrays in memory" if not shards else f"{len(shards)} training file(s) < {workers} workers"
        plan.decide("data.sharding", "data", f"{why}: every worker reads all the data and keeps its slice of "
                                             "each global batch")
        return num_train
    shares = [sum(shards[i::workers]) for i in range(workers)]
    steps = min(share // global_batch for share in shares) * workers
    covered = steps * global_batch
    plan.decide("data.sharding", "file",
                f"{len(shards)} training files >= {workers} workers: worker i reads files i, i+{workers}, ... "
                f"(shares {shares} examples); an epoch is {steps} steps, {covered} of {num_train} examples")
    return covered
