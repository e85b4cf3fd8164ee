"""One MLflow run: params, tags, metrics and artifacts, batched and retried.

Logging is batched (one `log_batch` per epoch), so it never sits in the step loop.
A launch's run (`launcher.run`) and a sweep's parent run (`launcher.sweep`) both use it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

PARAM_LIMIT = 500  # MLflow's value length limits
TAG_LIMIT = 5000
BATCH_LIMIT = 100  # params or tags per log_batch call


def with_retry(call, *args, attempts: int = 8, **kwargs):
    """SQLite allows one writer at a time: parallel sweep jobs retry a locked database."""
    for attempt in range(attempts):
        try:
            return call(*args, **kwargs)
        except Exception as err:
            if "database is locked" not in str(err) or attempt == attempts - 1:
                raise
            time.sleep(0.2 * 2**attempt)


class Tracker:
    """Thin wrapper over MlflowClient for one run."""

    def __init__(self, uri: str, experiment: str, run_name: str, artifact_root: Path,
                 resume_run_id: str | None = None, parent_run_id: str | None = None):
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        # MLflow prints the server URL as given, credentials included; the launcher prints it redacted.
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        from mlflow.tracking import MlflowClient

        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        found = self.client.get_experiment_by_name(experiment)
        if found is None:
            location = None if uri.startswith("http") else (artifact_root / experiment).resolve().as_uri()
            self.experiment_id = self.client.create_experiment(experiment, artifact_location=location)
        else:
            self.experiment_id = found.experiment_id
        self.resumed = False
        if resume_run_id and self._exists(resume_run_id):
            # A resumed launch continues the same MLflow run (same params, one metric history).
            self.client.update_run(resume_run_id, status="RUNNING")
            self.run_id, self.resumed = resume_run_id, True
        else:
            tags = {"mlflow.parentRunId": parent_run_id} if parent_run_id else None
            run = with_retry(self.client.create_run, self.experiment_id, run_name=run_name or None, tags=tags)
            self.run_id = run.info.run_id

    def _exists(self, run_id: str) -> bool:
        from mlflow.exceptions import MlflowException

        try:
            return self.client.get_run(run_id).info.experiment_id == self.experiment_id
        except MlflowException:
            return False

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        self._log_in_batches("params", [Param(k, str(v)[:PARAM_LIMIT]) for k, v in sorted(params.items())])

    def set_tags(self, tags: dict[str, Any]) -> None:
        from mlflow.entities import RunTag

        self._log_in_batches("tags", [RunTag(k, str(v)[:TAG_LIMIT]) for k, v in sorted(tags.items())])

    def _log_in_batches(self, kind: str, items: list) -> None:
        """MLflow takes at most 100 params or tags per `log_batch`."""
        for start in range(0, len(items), BATCH_LIMIT):
            with_retry(self.client.log_batch, self.run_id, **{kind: items[start:start + BATCH_LIMIT]})

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step) for k, v in metrics.items()]
        with_retry(self.client.log_batch, self.run_id, metrics=items)

    def logged_steps(self, metric: str) -> set[int]:
        return {m.step for m in self.client.get_metric_history(self.run_id, metric)}

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_artifacts(self, directory: Path, artifact_path: str | None = None) -> None:
        self.client.log_artifacts(self.run_id, str(directory), artifact_path)

    def end(self, status: str = "FINISHED") -> None:
        with_retry(self.client.set_terminated, self.run_id, status=status)

    @property
    def ui_hint(self) -> str:
        if self.uri.startswith("sqlite:///"):
            return f"mlflow ui --backend-store-uri {self.uri}  (run {self.run_id})"
        from launcher.tracking.uri import redact

        return f"{redact(self.uri).rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.run_id}"


class NullTracker:
    run_id = None
    resumed = False
    ui_hint = "tracking disabled (tracking.enabled=false)"

    def log_params(self, params):
        pass

    def set_tags(self, tags):
        pass

    def log_metrics(self, metrics, step):
        pass

    def log_artifact(self, path, artifact_path=None):
        pass

    def log_artifacts(self, directory, artifact_path=None):
        pass

    def logged_steps(self, metric):
        return set()

    def end(self, status="FINISHED"):
        pass
