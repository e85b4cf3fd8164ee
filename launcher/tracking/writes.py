"""The writes a run sends to MLflow, as typed records: each knows how MLflow's client applies it and how it is
kept as one JSON line in the spool (the same layout older launches wrote: run_id, kind, payload)."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from launcher.tracking.client import METRIC_BATCH, with_retry


@dataclass(frozen=True)
class Params:
    items: tuple[tuple[str, str], ...]
    kind: ClassVar[str] = "params"

    def apply(self, client, run_id: str) -> None:
        from mlflow.entities import Param

        with_retry(client.log_batch, run_id, params=[Param(k, v) for k, v in self.items])


@dataclass(frozen=True)
class Tags:
    items: tuple[tuple[str, str], ...]
    kind: ClassVar[str] = "tags"

    def apply(self, client, run_id: str) -> None:
        from mlflow.entities import RunTag

        with_retry(client.log_batch, run_id, tags=[RunTag(k, v) for k, v in self.items])


@dataclass(frozen=True)
class Metrics:
    items: tuple[tuple[str, float, int, int], ...]  # (key, value, timestamp ms, step)
    kind: ClassVar[str] = "metrics"

    def apply(self, client, run_id: str) -> None:
        from mlflow.entities import Metric

        with_retry(client.log_batch, run_id, metrics=[Metric(k, v, t, s) for k, v, t, s in self.items])


@dataclass(frozen=True)
class Artifact:
    path: str
    artifact_path: str | None = None
    kind: ClassVar[str] = "artifact"

    def apply(self, client, run_id: str) -> None:
        """Send a copy taken now: a file still being written (the console) would be sent past the length requests
        read first, and those extra bytes break the next request on the same connection (and the artifact is cut)."""
        with tempfile.TemporaryDirectory(prefix="launcher-artifact-") as folder:
            copy = shutil.copyfile(self.path, Path(folder) / Path(self.path).name)
            client.log_artifact(run_id, str(copy), self.artifact_path)


@dataclass(frozen=True)
class Artifacts:
    path: str
    artifact_path: str | None = None
    kind: ClassVar[str] = "artifacts"

    def apply(self, client, run_id: str) -> None:
        client.log_artifacts(run_id, self.path, self.artifact_path)


@dataclass(frozen=True)
class Inputs:
    """Dataset inputs: dicts of Dataset fields (name, digest, source_type, source, schema, profile) and the
    `context` they were used in (train, validation)."""

    datasets: tuple[dict, ...]
    kind: ClassVar[str] = "inputs"

    def apply(self, client, run_id: str) -> None:
        from mlflow.entities import Dataset, DatasetInput, InputTag

        inputs = [
            DatasetInput(
                Dataset(**{k: v for k, v in d.items() if k != "context"}),
                tags=[InputTag("mlflow.data.context", d["context"])],
            )
            for d in self.datasets
        ]
        with_retry(client.log_inputs, run_id, datasets=inputs)


@dataclass(frozen=True)
class Register:
    """A new version of registered model `name` from the run's logged MLflow model at `artifact_path`."""

    name: str
    artifact_path: str
    kind: ClassVar[str] = "register"

    def apply(self, client, run_id: str) -> None:
        from mlflow.exceptions import MlflowException

        try:
            with_retry(client.create_registered_model, self.name)
        except MlflowException as err:
            if err.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        source = f"{client.get_run(run_id).info.artifact_uri.rstrip('/')}/{self.artifact_path}"
        with_retry(client.create_model_version, self.name, source, run_id=run_id)


@dataclass(frozen=True)
class Terminate:
    status: str
    kind: ClassVar[str] = "terminate"

    def apply(self, client, run_id: str) -> None:
        with_retry(client.set_terminated, run_id, status=self.status)


Write = Params | Tags | Metrics | Artifact | Artifacts | Inputs | Register | Terminate
KINDS: dict[str, type] = {
    cls.kind: cls for cls in (Params, Tags, Metrics, Artifact, Artifacts, Inputs, Register, Terminate)
}


def to_line(run_id: str, write: Write) -> str:
    """One spool line: {"run_id", "kind", "payload"}."""
    payload: dict[str, Any] = {k: v for k, v in write.__dict__.items()}
    if "datasets" in payload:
        payload["datasets"] = list(payload["datasets"])
    return json.dumps({"run_id": run_id, "kind": write.kind, "payload": payload})


def from_line(line: str) -> tuple[str, Write]:
    """(run id, write) from a spool line (ValueError for a kind this launcher does not know)."""
    data = json.loads(line)
    cls = KINDS.get(data["kind"])
    if cls is None:
        raise ValueError(f"unknown tracking write {data['kind']!r}")
    payload = dict(data["payload"])
    if "items" in payload:
        payload["items"] = tuple(tuple(item) for item in payload["items"])
    if "datasets" in payload:
        payload["datasets"] = tuple(payload["datasets"])
    return data["run_id"], cls(**payload)


def coalesced(pending: list[Write]) -> tuple[Write, int]:
    """The first queued write, with the metric writes right after it joined into one call (MLflow takes up to
    METRIC_BATCH points per log_batch): (the write to send, how many queued writes it covers)."""
    first = pending[0]
    if not isinstance(first, Metrics):
        return first, 1
    items, taken = list(first.items), 1
    for write in pending[1:]:
        if not isinstance(write, Metrics) or len(items) + len(write.items) > METRIC_BATCH:
            break
        items += write.items
        taken += 1
    return Metrics(tuple(items)), taken
