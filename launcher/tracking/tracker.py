"""One MLflow run: params, tags, metrics and artifacts, batched, retried, and kept through an outage.

Writes never sit in the step loop: they are queued, in order, and a delivery thread sends them
(metric points gathered for up to METRIC_GAP seconds and sent in one call), so a kill loses at
most the last second of points. `flush()` waits for the queue (a launch calls it at every epoch
end); a write MLflow refuses (as opposed to a server that does not answer) is raised there, or at
the next write.
A launch's run (`launcher.run`) and a sweep's parent run (`launcher.sweep`) both use it.

When the tracking server goes away mid-run, training goes on: every write is kept, in order,
and delivered when the server answers again (tried every RETRY_SECONDS). At the end the launch
waits up to `tracking.outage_wait` seconds; what is still undelivered is written to the run dir's
`tracking_pending.jsonl`, which the next launch in that run dir (a resume) or
`python -m launcher.tracking.sync <run dir>` delivers.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from launcher.tracking.uri import redact

PARAM_LIMIT = 500  # MLflow's value length limits
TAG_LIMIT = 5000
BATCH_LIMIT = 100  # params or tags per log_batch call
METRIC_BATCH = 1000  # metric points per log_batch call
METRIC_GAP = 1.0  # seconds metric points may wait in the queue to be sent together
RETRY_SECONDS = 5.0  # during an outage, how often a write tries the server again
PENDING_FILE = "tracking_pending.jsonl"
# What an unreachable server looks like through MLflow's client (it wraps requests' errors in text).
OUTAGE_SIGNS = (
    "Connection refused",
    "Max retries exceeded",
    "Failed to establish",
    "timed out",
    "Connection aborted",
    "RemoteDisconnected",
    "Bad Gateway",
    "Service Unavailable",
    "Gateway Timeout",
    "Name or service not known",
)


def with_retry(call, *args, attempts: int = 8, **kwargs):
    """SQLite allows one writer at a time: parallel sweep jobs retry a locked database."""
    for attempt in range(attempts):
        try:
            return call(*args, **kwargs)
        except Exception as err:
            if "database is locked" not in str(err) or attempt == attempts - 1:
                raise
            time.sleep(0.2 * 2**attempt)


def experiment_id(client, name: str, artifact_location: str | None) -> str:
    """The experiment's id, created when missing; a locked database is retried, and a parallel job that created
    it first is no error."""
    found = with_retry(client.get_experiment_by_name, name)
    if found is not None:
        return found.experiment_id
    try:
        return with_retry(client.create_experiment, name, artifact_location=artifact_location)
    except Exception:
        found = with_retry(client.get_experiment_by_name, name)
        if found is None:
            raise
        return found.experiment_id


def is_outage(err: BaseException) -> bool:
    """The server did not answer (as opposed to refusing a request it understood)."""
    return isinstance(err, ConnectionError) or any(sign in str(err) for sign in OUTAGE_SIGNS)


def _quiet_client_retries() -> None:
    """MLflow's client retries a dead server for minutes per call by default; the Tracker keeps the
    writes itself, so one attempt is enough."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")


class Tracker:
    """One MLflow run's writes, queued in order for a delivery thread; created or resumed here."""

    def __init__(
        self,
        uri: str,
        experiment: str,
        run_name: str,
        artifact_root: Path,
        resume_run_id: str | None = None,
        parent_run_id: str | None = None,
        run_dir: Path | None = None,
        outage_wait: float = 0.0,
    ):
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        # MLflow prints the server URL as given, credentials included; the launcher prints it redacted.
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        _quiet_client_retries()
        from mlflow.tracking import MlflowClient

        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        self.pending: list[tuple[str, dict]] = []  # writes the server has not taken yet, in order
        self.pending_path = run_dir / PENDING_FILE if run_dir is not None else None
        self.outage_wait = outage_wait
        self._next_try = 0.0
        self._outage = False
        self._changed = threading.Condition()  # guards pending, _refused, _closing, _outage
        self._refused: BaseException | None = None
        self._closing = False
        self._delivery: threading.Thread | None = None
        self._system = None  # MLflow's system metrics monitor, when started
        self._last_delivery = 0.0
        self._hurry = 0  # flush() / end() waiting: deliver metric points without gathering
        location = None if uri.startswith("http") else (artifact_root / experiment).resolve().as_uri()
        self.experiment_id = experiment_id(self.client, experiment, location)
        self.resumed = False
        if resume_run_id and self._exists(resume_run_id):
            # A resumed launch continues the same MLflow run (same params, one metric history).
            with_retry(self.client.update_run, resume_run_id, status="RUNNING")
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
        items = [[k, str(v)[:PARAM_LIMIT]] for k, v in sorted(params.items())]
        for start in range(0, len(items), BATCH_LIMIT):  # MLflow takes at most 100 per log_batch
            self._write("params", {"items": items[start : start + BATCH_LIMIT]})

    def set_tags(self, tags: dict[str, Any]) -> None:
        items = [[k, str(v)[:TAG_LIMIT]] for k, v in sorted(tags.items())]
        for start in range(0, len(items), BATCH_LIMIT):
            self._write("tags", {"items": items[start : start + BATCH_LIMIT]})

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        self._write("metrics", {"items": [[k, float(v), now, step] for k, v in metrics.items()]})

    def logged_steps(self, metric: str) -> set[int]:
        return {m.step for m in self.client.get_metric_history(self.run_id, metric)}

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        self._write("artifact", {"path": str(path), "artifact_path": artifact_path})

    def log_artifacts(self, directory: Path, artifact_path: str | None = None) -> None:
        self._write("artifacts", {"path": str(directory), "artifact_path": artifact_path})

    def log_inputs(self, datasets: list[dict]) -> None:
        """MLflow dataset inputs: dicts of Dataset fields (name, digest, source_type, source, schema,
        profile) and the `context` they were used in (train, validation)."""
        self._write("inputs", {"datasets": datasets})

    def register_model(self, name: str, artifact_path: str) -> None:
        """A new version of registered model `name` from this run's logged MLflow model."""
        self._write("register", {"name": name, "artifact_path": artifact_path})

    def start_system_metrics(self, interval: float) -> None:
        """MLflow's own CPU / memory / disk / network sampling, as `system/*` metrics of this run."""
        try:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor
        except ImportError as err:  # psutil missing
            print(f"NOTE: no system metrics ({err}); pip install psutil", file=sys.stderr, flush=True)
            return

        logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)
        self._system = SystemMetricsMonitor(
            self.run_id, sampling_interval=interval, resume_logging=self.resumed, tracking_uri=self.uri
        )
        self._system.start()

    def _stop_system_metrics(self) -> None:
        if self._system is not None:
            self._system.finish()
            self._system = None

    def flush(self) -> None:
        """Wait until every write so far is delivered (or the server is found away: then they stay
        kept); raise what MLflow refused."""
        with self._changed:
            self._hurry += 1
            self._changed.notify_all()
            try:
                while self.pending and not self._outage and self._refused is None:
                    self._changed.wait()
            finally:
                self._hurry -= 1
            self._raise_refused()

    def end(self, status: str = "FINISHED") -> None:
        """Mark the run; during an outage wait up to `outage_wait` s, then leave the rest in the run dir."""
        self._stop_system_metrics()
        self._write("terminate", {"status": status}, check=False)
        deadline = time.monotonic() + self.outage_wait
        with self._changed:
            self._hurry += 1
            self._changed.notify_all()
            while self.pending:
                if self._outage and time.monotonic() >= deadline:
                    break
                self._changed.wait(0.5)
            self._closing = True
            self._changed.notify_all()
        if self._delivery is not None:
            self._delivery.join(timeout=30)  # a write in flight finishes (or times out) before the rest is kept
        if self.pending:
            self._spool()
        if self._refused is not None:
            print(f"WARNING: MLflow refused a write of run {self.run_id}: {self._refused}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------ delivery

    def _write(self, kind: str, payload: dict, check: bool = True) -> None:
        """Queue a write for the delivery thread (started with the first write)."""
        with self._changed:
            if check:
                self._raise_refused()
            self.pending.append((kind, payload))
            if self._delivery is None:
                self._delivery = threading.Thread(target=self._deliver_forever, name="mlflow-delivery", daemon=True)
                self._delivery.start()
            self._changed.notify_all()

    def _raise_refused(self) -> None:
        if self._refused is not None:
            refused, self._refused = self._refused, None
            raise refused

    def _deliver_forever(self) -> None:
        while True:
            with self._changed:
                while not self._closing and not self.pending:
                    self._changed.wait()
                if self._closing and (self._outage or not self.pending):
                    return  # end() keeps what an outage left in the run dir
                wait = self._next_try - time.monotonic()
                if wait > 0:  # in an outage: try again later (or sooner, if end() is waiting)
                    self._changed.wait(wait)
                    continue
                gather = self._last_delivery + METRIC_GAP - time.monotonic()
                if gather > 0 and not self._hurry and all(kind == "metrics" for kind, _ in self.pending):
                    # Metric points wait up to METRIC_GAP to go together: one store transaction a
                    # second instead of one per point (on a 2-core machine that CPU is the step loop's).
                    self._changed.wait(gather)
                    continue
            self._deliver_queued()
            self._last_delivery = time.monotonic()

    def _deliver_queued(self) -> None:
        """Send what is queued, in order, until the queue is empty or the server does not answer."""
        while True:
            with self._changed:
                if not self.pending:
                    self._changed.notify_all()
                    return
                kind, payload, taken = _coalesced(self.pending)
            try:
                self._apply(kind, payload)
            except Exception as err:
                with self._changed:
                    if not is_outage(err):
                        del self.pending[:taken]  # refused by a server that answered: raised to the launch,
                        self._refused = err  # the writes after it still go
                    else:
                        self._mark_outage(err)
                    self._changed.notify_all()
                return
            with self._changed:
                del self.pending[:taken]
                if self._outage:
                    print("Tracking server back: delivered the writes kept during the outage.", flush=True)
                    self._outage = False
                self._changed.notify_all()

    def _mark_outage(self, err: BaseException) -> None:
        if not self._outage:
            print(
                f"WARNING: tracking server {redact(self.uri)} unreachable ({redact(str(err))[:160]}); "
                f"training goes on, MLflow writes are kept and delivered when it answers.",
                file=sys.stderr,
                flush=True,
            )
            self._outage = True
        self._next_try = time.monotonic() + RETRY_SECONDS

    def _apply(self, kind: str, payload: dict) -> None:
        apply(self.client, self.run_id, kind, payload)

    def _spool(self) -> None:
        """Undelivered writes to the run dir, for the next launch there or `launcher.tracking.sync`."""

        points = sum(len(p["items"]) for k, p in self.pending if k == "metrics")
        if self.pending_path is None:
            print(
                f"WARNING: {len(self.pending)} MLflow write(s) ({points} metric points) could not be delivered "
                f"to {redact(self.uri)} and are lost (no run dir to keep them in).",
                file=sys.stderr,
                flush=True,
            )
            return
        with open(self.pending_path, "a") as handle:
            for kind, payload in self.pending:
                handle.write(json.dumps({"run_id": self.run_id, "kind": kind, "payload": payload}) + "\n")
        print(
            f"WARNING: the tracking server {redact(self.uri)} did not come back within tracking.outage_wait="
            f"{self.outage_wait:g}s: {len(self.pending)} write(s) ({points} metric points) kept in "
            f"{self.pending_path}.\n  Deliver them when it is up: python -m launcher.tracking.sync "
            f"{self.pending_path.parent}  (a resume in this run dir delivers them too)",
            file=sys.stderr,
            flush=True,
        )
        self.pending = []

    def deliver_spool(self) -> int:
        """Writes an earlier launch in this run dir could not deliver: send them first, in order."""
        if self.pending_path is None or not self.pending_path.exists():
            return 0
        count = deliver_file(self.client, self.pending_path)
        if self.resumed:  # the earlier launch's final status was among them; this launch goes on
            with_retry(self.client.update_run, self.run_id, status="RUNNING")
        print(f"Delivered {count} MLflow write(s) kept by an earlier launch during a tracking outage.", flush=True)
        return count

    @property
    def ui_hint(self) -> str:
        if self.uri.startswith("sqlite:///"):
            return f"mlflow ui --backend-store-uri {self.uri}  (run {self.run_id})"

        return f"{redact(self.uri).rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.run_id}"


def _coalesced(pending: list[tuple[str, dict]]) -> tuple[str, dict, int]:
    """The first queued write, with the metric writes right after it joined into one call (MLflow
    takes up to METRIC_BATCH points per log_batch): (kind, payload, how many queued writes it covers)."""
    kind, payload = pending[0]
    if kind != "metrics":
        return kind, payload, 1
    items, taken = list(payload["items"]), 1
    for next_kind, next_payload in pending[1:]:
        if next_kind != "metrics" or len(items) + len(next_payload["items"]) > METRIC_BATCH:
            break
        items += next_payload["items"]
        taken += 1
    return kind, {"items": items}, taken


def apply(client, run_id: str, kind: str, payload: dict) -> None:
    """One kept write, as MLflow's client calls it (the spool stores plain JSON)."""
    from mlflow.entities import Metric, Param, RunTag

    items = payload.get("items", [])
    if kind == "params":
        with_retry(client.log_batch, run_id, params=[Param(k, v) for k, v in items])
    elif kind == "tags":
        with_retry(client.log_batch, run_id, tags=[RunTag(k, v) for k, v in items])
    elif kind == "metrics":
        with_retry(client.log_batch, run_id, metrics=[Metric(k, v, t, s) for k, v, t, s in items])
    elif kind == "artifact":
        client.log_artifact(run_id, payload["path"], payload["artifact_path"])
    elif kind == "artifacts":
        client.log_artifacts(run_id, payload["path"], payload["artifact_path"])
    elif kind == "inputs":
        from mlflow.entities import Dataset, DatasetInput, InputTag

        with_retry(
            client.log_inputs,
            run_id,
            datasets=[
                DatasetInput(
                    Dataset(**{k: v for k, v in d.items() if k != "context"}),
                    tags=[InputTag("mlflow.data.context", d["context"])],
                )
                for d in payload["datasets"]
            ],
        )
    elif kind == "register":
        _register(client, run_id, payload["name"], payload["artifact_path"])
    elif kind == "terminate":
        with_retry(client.set_terminated, run_id, status=payload["status"])
    else:
        raise ValueError(f"unknown tracking write {kind!r}")


def _register(client, run_id: str, name: str, artifact_path: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        with_retry(client.create_registered_model, name)
    except MlflowException as err:
        if err.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    source = f"{client.get_run(run_id).info.artifact_uri.rstrip('/')}/{artifact_path}"
    with_retry(client.create_model_version, name, source, run_id=run_id)


def deliver_file(client, path: Path) -> int:
    """Deliver a spool in order; what is delivered is removed, so a second outage loses nothing either."""
    lines = [line for line in Path(path).read_text().splitlines() if line.strip()]
    for index, line in enumerate(lines):
        write = json.loads(line)
        try:
            apply(client, write["run_id"], write["kind"], write["payload"])
        except Exception:
            Path(path).write_text("".join(rest + "\n" for rest in lines[index:]))
            raise
    Path(path).unlink()
    return len(lines)


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

    def flush(self):
        pass

    def log_inputs(self, datasets):
        pass

    def register_model(self, name, artifact_path):
        pass

    def start_system_metrics(self, interval):
        pass

    def end(self, status="FINISHED"):
        pass
