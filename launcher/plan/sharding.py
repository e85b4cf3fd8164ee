"""How a multi-worker job splits its training data, decided from the shards' sizes (pure).

File-level sharding (worker i reads files i, i+W, i+2W, ...) reads every example once across the job;
it needs at least as many files as workers. Otherwise every worker reads every file and keeps its
slice of each global batch (data-level). Under file sharding the workers' shares differ when the files
do, and every worker must run the same number of steps, so an epoch is the smallest share in whole
global batches per worker, times the workers.
"""

from __future__ import annotations

from launcher.plan.decisions import DataPlan, Plan


def decide_sharding(plan: Plan, shards: tuple[int, ...], num_train: int) -> tuple[Plan, int]:
    """The Plan with the data decisions added, and the training examples one epoch covers."""
    resume = None
    if shards:
        resume = (
            "exact (skips)",
            f"streamed from {len(shards)} file(s) in a fixed order with a seeded shuffle: a "
            "resumed epoch re-reads its first batches and skips them (exact, at the cost of reading them)",
        )
    if plan.cluster is None:
        return (plan.with_record(DataPlan.of(resume=resume)) if resume else plan), num_train
    workers, global_batch = len(plan.cluster.workers), plan.batch.global_batch
    if len(shards) < workers:
        why = "arrays in memory" if not shards else f"{len(shards)} training file(s) < {workers} workers"
        sharding = ("data", f"{why}: every worker reads all the data and keeps its slice of each global batch")
        return plan.with_record(DataPlan.of(resume=resume, sharding=sharding)), num_train
    shares = [sum(shards[i::workers]) for i in range(workers)]
    steps = min(share // global_batch for share in shares) * workers
    covered = steps * global_batch
    sharding = (
        "file",
        f"{len(shards)} training files >= {workers} workers: worker i reads files i, i+{workers}, "
        f"... (shares {shares} examples); an epoch is {steps} steps, {covered} of {num_train} examples",
    )
    return plan.with_record(DataPlan.of(resume=resume, sharding=sharding)), covered
