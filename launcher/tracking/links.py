"""Where a person opens what the launcher logged: MLflow UI addresses for a run, an experiment and a sweep's
comparison, in the UI's machine-learning view.

MLflow 3 opens an experiment in its GenAI view (traces, token usage) unless the address asks for the runs table
(`workflowType=machine_learning`); the experiment's kind tag says the same to the UI for later visits. A local
store has no UI until `mlflow ui` serves it: its links are where that command serves by default, with the command.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from launcher.tracking.uri import redact

VIEW = "workflowType=machine_learning"
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
LOCAL_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves unless given --host/--port


@dataclass(frozen=True)
class MlflowUi:
    """The UI of one tracking store: its address, and for a local store the command that serves it."""

    base: str
    serve: str | None = None

    @classmethod
    def of(cls, uri: str) -> MlflowUi:
        if uri.startswith(("http://", "https://")):
            return cls(redact(uri).rstrip("/"))
        return cls(LOCAL_UI, f"mlflow ui --backend-store-uri {uri}")

    def experiment(self, experiment_id: str) -> str:
        return f"{self.base}/#/experiments/{experiment_id}?{VIEW}"

    def run(self, experiment_id: str, run_id: str) -> str:
        return f"{self.base}/#/experiments/{experiment_id}/runs/{run_id}?{VIEW}"

    def compare(self, run_ids: Iterable[str], experiment_ids: Iterable[str]) -> str:
        runs = json.dumps(list(run_ids), separators=(",", ":"))
        experiments = json.dumps(sorted(set(experiment_ids)), separators=(",", ":"))
        return f"{self.base}/#/compare-runs?runs={runs}&experiments={experiments}"

    def serving(self) -> str:
        """A line for a local store: how to start the UI the links point at ('' for a server)."""
        return f"serve it first: {self.serve}" if self.serve else ""

    def run_hint(self, experiment_id: str, run_id: str) -> str:
        """Where a person opens a run: its page (and, for a local store, the command that serves the UI)."""
        page = self.run(experiment_id, run_id)
        return f"{page}  ({self.serving()})" if self.serve else page


@dataclass(frozen=True)
class SweepLinks:
    """A finished sweep's ways in: its jobs side by side, its parent run, the experiment's runs table."""

    ui: MlflowUi
    experiment_id: str
    parent_run_id: str
    child_run_ids: tuple[str, ...]

    @property
    def compare(self) -> str:
        return self.ui.compare(self.child_run_ids, [self.experiment_id])

    @property
    def parent(self) -> str:
        return self.ui.run(self.experiment_id, self.parent_run_id)

    @property
    def runs(self) -> str:
        return self.ui.experiment(self.experiment_id)

    def console(self) -> str:
        lines = [
            "MLflow:",
            f"  the {len(self.child_run_ids)} jobs side by side  {self.compare}",
            f"  the sweep's parent run     {self.parent}",
            f"  the experiment's runs      {self.runs}",
        ]
        if self.ui.serve:
            lines.append(f"  (a local store: {self.ui.serving()})")
        return "\n".join(lines)

    def note(self) -> str:
        """The parent run's description (Markdown); links relative to the page, so they work wherever the UI
        is served."""
        page = self.ui.base + "/"
        return (
            f"[Compare the {len(self.child_run_ids)} jobs side by side]({self.compare.removeprefix(page)}) · "
            f"[the experiment's runs]({self.runs.removeprefix(page)})"
        )


def model_uri(run_id: str, artifact: str) -> str:
    """The run's logged model as MLflow addresses it: what `mlflow.pyfunc.load_model` and `mlflow models serve`
    take."""
    return f"runs:/{run_id}/{artifact}"


def serve_command(uri: str, run_id: str, artifact: str, port: int = 5001) -> str:
    """`mlflow models serve` of the run's model, copy-ready from any directory: the tracking URI (as resolved, its
    credentials left out) in MLFLOW_TRACKING_URI, port 5001 (`mlflow ui`'s 5000 stays free)."""
    return (
        f"MLFLOW_TRACKING_URI={redact(uri)} mlflow models serve -m {model_uri(run_id, artifact)} "
        f"--env-manager local -p {port}"
    )
