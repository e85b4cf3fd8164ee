"""Workers of one multi-worker job agreeing, over TensorFlow's own collectives (no side channel).

Three questions need every worker's answer: is the resolved Plan the same everywhere (a worker
started with other overrides would train something else or hang), did a stop signal reach any
worker (all must stop at the same step, or the others wait in a collective forever), and did
training end with the same weights everywhere.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from launcher.config.errors import Violation


class Agreement:
    """Collectives over the job's workers; one value per worker, in rank order."""

    def __init__(self, strategy, workers: int):
        self.strategy = strategy
        self.workers = workers
        self.per_worker = max(strategy.num_replicas_in_sync // max(self.workers, 1), 1)

    def gather_text(self, text: str) -> list[str]:
        """Every worker's `text` (the same call on every worker)."""
        data = np.frombuffer(text.encode(), np.uint8).astype(np.int32)  # collectives carry no uint8
        lengths = self._gather(np.array([len(data)], np.int32)).reshape(-1)
        padded = np.zeros([int(lengths.max())], np.int32)
        padded[: len(data)] = data
        rows = self._gather(padded)
        texts = [bytes(row[:n].astype(np.uint8)).decode() for row, n in zip(rows, lengths, strict=True)]
        return texts[:: self.per_worker]

    def any_stop(self, signum: int | None) -> int | None:
        """The signal one worker received (the first in rank order), or None when none did: one small collective
        per chunk boundary."""
        signals = self._gather(np.array([signum or 0], np.int32)).reshape(-1)
        return next((int(s) for s in signals if s), None)

    def _gather(self, array: np.ndarray) -> np.ndarray:
        import tensorflow as tf

        values = self.strategy.experimental_distribute_values_from_function(lambda _ctx: tf.constant(array[np.newaxis]))
        return self.strategy.gather(values, axis=0).numpy()


# Keys that differ between workers by design.
PER_WORKER_KEYS = frozenset(
    {"plan.process.is_chief", "plan.strategy.task_index", "config.strategy.task_index", "config.checkpoint.directory"}
)


def comparable(plan_decisions: dict, settings: dict) -> dict:
    """What must be equal on every worker: the Plan's values and the training config, flattened."""
    flat = {f"plan.{key}": value for key, value in plan_decisions.items()}
    for group in (
        "seed",
        "model",
        "dataset",
        "precision",
        "strategy",
        "loss_scale",
        "scaling",
        "optimizer",
        "train",
        "checkpoint",
    ):
        _flatten(f"config.{group}", settings.get(group), flat)
    return {key: value for key, value in flat.items() if key not in PER_WORKER_KEYS}


def differences(payloads: list[dict]) -> dict[str, list]:
    """key -> every worker's value, for the keys where some worker differs from the chief."""
    keys = sorted(set().union(*payloads))
    return {
        key: [p.get(key, "<missing>") for p in payloads]
        for key in keys
        if any(p.get(key, "<missing>") != payloads[0].get(key, "<missing>") for p in payloads[1:])
    }


def disagreement(key: str, values: list) -> Violation:
    """The refusal for one key where workers differ. A different resume point means a worker did not find the
    chief's checkpoints (a checkpoint.directory that is not shared): it is refused, not started from scratch."""
    others = ", ".join(f"worker {rank} has {value!r}" for rank, value in enumerate(values) if rank)
    fix = (
        "checkpoint.directory must be a path every worker reads (a shared filesystem): they resume from the "
        "chief's checkpoints"
        if key == "plan.resume"
        else "start every worker with the same overrides (only strategy.task_index differs)"
    )
    return Violation(key.removeprefix("config."), values[0], f"the chief's value on every worker; {others}", fix)


def weights_digest(weights) -> str:
    """sha256 over every weight's bytes: equal digests mean bit-identical models."""
    digest = hashlib.sha256()
    for weight in weights:
        digest.update(np.ascontiguousarray(np.asarray(weight)).tobytes())
    return digest.hexdigest()


def _flatten(prefix: str, value, into: dict) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}", item, into)
    else:
        into[prefix] = json.loads(json.dumps(value, default=str))
