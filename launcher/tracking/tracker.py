"""One MLflow run for a launch, a sweep's parent or a doctor: opened or resumed, written to, ended.

The run's lifecycle lives here; its writes are typed records (`writes`) queued for a delivery thread
(`delivery`: batched, in order, kept through an outage), and what an outage leaves at the end goes to
the run dir's spool (`spool`), delivered by the next launch there or `python -m launcher.tracking.sync`.
`flush()` waits for the queue (a launch calls it at every epoch end); a write MLflow refuses (as opposed
to a server that does not answer) is raised there, or at the next write.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Protocol

from launcher.files import CONSOLE_FILE
from launcher.tracking.client import BATCH_LIMIT, PARAM_LIMIT, TAG_LIMIT, experiment_id, quiet_client, with_retry
from launcher.tracking.delivery import Delivery
from launcher.tracking.held import HeldPoints
from launcher.tracking.links import MlflowUi
from launcher.tracking.spool import Spool
from launcher.tracking.succession import (
    CREATION_TAG,
    PREDECESSOR_TAG,
    STARTS_TAG,
    SUCCESSOR_TAG,
    Decision,
    EarlierRun,
    PendingCreation,
    Succession,
    pending_creation,
    remember_creation,
    remember_run,
    remembered_run,
    succession,
)
from launcher.tracking.uri import redact, resolve_uri
from launcher.tracking.writes import Artifact, Artifacts, Inputs, Metrics, Params, Register, Tags, Terminate, Write


class RunTracker(Protocol):
    """What a launch writes to its run; `Tracker` sends it to MLflow, `NullTracker` nowhere."""

    run_id: str | None
    uri: str  # the tracking URI as resolved ("" when nothing is tracked)
    resumed: bool  # continues a checkpoint's run
    adopted: bool  # trains from step 0 again in the run dir's earlier run (it ended before its first checkpoint)
    decision: Decision | None  # what became of the run dir's earlier run
    held: HeldPoints  # the points the run held when this launch continued it (not logged again)

    def log_params(self, params: dict[str, Any]) -> None: ...
    def set_tags(self, tags: dict[str, Any]) -> None: ...
    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...
    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None: ...
    def log_artifacts(self, directory: Path, artifact_path: str | None = None) -> None: ...
    def log_inputs(self, datasets: list[dict]) -> None: ...
    def register_model(self, name: str, artifact_path: str) -> None: ...
    def logged_steps(self, metric: str) -> set[int]: ...
    def start_system_metrics(self, interval: float) -> None: ...
    def deliver_spool(self) -> int: ...
    def flush(self) -> None: ...
    def end(self, status: str = "FINISHED") -> None: ...

    @property
    def ui_hint(self) -> str: ...


class Tracker:
    """One MLflow run: created (or resumed) here, written through a `Delivery`, ended with a status."""

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
        remember: bool = False,
        params: dict[str, Any] | None = None,
        tags: dict[str, str] | None = None,
    ):
        """`resume_run_id`: the run a checkpoint belongs to (continued as it is). `remember`: the run dir records
        its run (`RUN_FILE`, a training launch); the run it remembered is then continued from step 0, succeeded
        or left alone (`succession`), comparing its params with `params`, the ones this launch will log. `tags`:
        a new run is created with them, so whoever records its id can find it even if killed before the record."""
        quiet_client()
        from mlflow.tracking import MlflowClient

        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        self.run_dir = run_dir
        self.spool = Spool.in_run_dir(run_dir) if run_dir is not None else None
        self.outage_wait = outage_wait
        self._system = None  # MLflow's system metrics monitor, when started
        self._record_in = run_dir if remember else None
        location = None if uri.startswith("http") else (artifact_root / experiment).resolve().as_uri()
        self.experiment_id = experiment_id(self.client, experiment, location)
        deleted = bool(resume_run_id) and self._deleted(resume_run_id)
        self.resumed = bool(resume_run_id) and not deleted and self._exists(resume_run_id)
        self.decision: Decision | None = None  # what became of the run dir's earlier run (no checkpoint)
        if self.resumed:
            # A resumed launch continues the same MLflow run (same params, one metric history).
            with_retry(self.client.update_run, resume_run_id, status="RUNNING")
            self.run_id = resume_run_id
        else:
            earlier = run_dir_run(self.client, self._record_in) if self._record_in is not None else None
            # A checkpoint's run deleted in MLflow (its UI's delete): a new run continues it, linked to it.
            linked = {**(tags or {}), PREDECESSOR_TAG: resume_run_id} if deleted else tags or {}
            self.run_id = self._start(run_name, parent_run_id, earlier, params or {}, linked)
            if deleted:
                print(
                    f"WARNING: this run's MLflow run {resume_run_id} was deleted in MLflow; the run continues into "
                    f"a new MLflow run {self.run_id} (tag {PREDECESSOR_TAG}), its earlier epochs logged again from "
                    f"the checkpoint. To continue the old one instead: mlflow runs restore --run-id {resume_run_id}, "
                    "before the next launch.",
                    file=sys.stderr,
                    flush=True,
                )
        if self._record_in is not None:
            remember_run(self._record_in, self.run_id, self.experiment_id)
        self.held = HeldPoints()
        self._read_held()
        self.delivery = Delivery(lambda write: write.apply(self.client, self.run_id), redact(uri))

    @property
    def adopted(self) -> bool:
        """Training starts over in the run dir's earlier run (it ended before its first checkpoint)."""
        return self.decision is not None and self.decision.succession is Succession.ADOPT

    def _start(
        self, run_name: str, parent_run_id: str | None, earlier_run_id: str | None, params: dict, tags: dict
    ) -> str:
        """The run this launch trains from step 0 in: the earlier one again, or a new one (linked to it)."""
        earlier = self._earlier(earlier_run_id)
        shown = {k: str(v)[:PARAM_LIMIT] for k, v in params.items()}
        self.decision = succession(earlier, shown) if earlier is not None else None
        if self.adopted:
            with_retry(self.client.update_run, earlier.run_id, status="RUNNING")
            with_retry(self.client.set_tag, earlier.run_id, STARTS_TAG, str(earlier.starts + 1))
            if earlier.predecessor:  # a successor killed while it was being made: finish linking the two
                self._succeed(earlier.predecessor, earlier.run_id)
            return earlier.run_id
        tags = {**tags, "mlflow.parentRunId": parent_run_id} if parent_run_id else dict(tags)
        succeeding = self.decision is not None and self.decision.succession is Succession.SUCCEED
        if succeeding:
            tags[PREDECESSOR_TAG] = earlier.run_id
        if self._record_in is not None:  # a kill before `remember_run` leaves the run findable, not orphaned
            creation = PendingCreation(uuid.uuid4().hex, self.experiment_id)
            remember_creation(self._record_in, creation)
            tags[CREATION_TAG] = creation.token
        run = with_retry(self.client.create_run, self.experiment_id, run_name=run_name or None, tags=tags or None)
        if succeeding:
            self._succeed(earlier.run_id, run.info.run_id)
        return run.info.run_id

    def _succeed(self, earlier_run_id: str, run_id: str) -> None:
        """The earlier run points to its successor; if still RUNNING, its process is gone (this launch holds the
        run dir's lock): KILLED, not RUNNING forever."""
        if with_retry(self.client.get_run, earlier_run_id).info.status == "RUNNING":
            with_retry(self.client.set_terminated, earlier_run_id, status="KILLED")
        with_retry(self.client.set_tag, earlier_run_id, SUCCESSOR_TAG, run_id)

    def _earlier(self, run_id: str | None) -> EarlierRun | None:
        from mlflow.exceptions import MlflowException

        if not run_id:
            return None
        try:
            run = with_retry(self.client.get_run, run_id)
        except MlflowException:
            return None  # another store, or deleted
        if run.info.experiment_id != self.experiment_id or run.info.lifecycle_stage != "active":
            return None
        epochs = len(with_retry(self.client.get_metric_history, run_id, "loss"))
        starts = run.data.tags.get(STARTS_TAG, "1")
        return EarlierRun(
            run_id,
            run.info.status,
            epochs,
            dict(run.data.params),
            int(starts) if starts.isdigit() else 1,
            run.data.tags.get(PREDECESSOR_TAG),
        )

    def _read_held(self) -> None:
        """A continued run (resumed or started over in): the points its earlier launches logged."""
        if self.resumed or self.adopted:
            self.held = HeldPoints.of_run(self.client, self.run_id)

    def _deleted(self, run_id: str) -> bool:
        from mlflow.exceptions import MlflowException

        try:
            return self.client.get_run(run_id).info.lifecycle_stage == "deleted"
        except MlflowException:
            return False

    def _exists(self, run_id: str) -> bool:
        from mlflow.exceptions import MlflowException

        try:
            return self.client.get_run(run_id).info.experiment_id == self.experiment_id
        except MlflowException:
            return False

    # --------------------------------------------------------------- writes

    def log_params(self, params: dict[str, Any]) -> None:
        items = [(k, str(v)[:PARAM_LIMIT]) for k, v in sorted(params.items())]
        for start in range(0, len(items), BATCH_LIMIT):  # MLflow takes at most 100 per log_batch
            self.delivery.put(Params(tuple(items[start : start + BATCH_LIMIT])))

    def set_tags(self, tags: dict[str, Any]) -> None:
        items = [(k, str(v)[:TAG_LIMIT]) for k, v in sorted(tags.items())]
        for start in range(0, len(items), BATCH_LIMIT):
            self.delivery.put(Tags(tuple(items[start : start + BATCH_LIMIT])))

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Queued; a point the continued run already holds at `step` is left out (`held`)."""
        metrics = self.held.new(metrics, step)
        if not metrics:
            return
        now = int(time.time() * 1000)
        self.delivery.put(Metrics(tuple((k, float(v), now, step) for k, v in metrics.items())))

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        self.delivery.put(Artifact(str(path), artifact_path))

    def log_artifacts(self, directory: Path, artifact_path: str | None = None) -> None:
        self.delivery.put(Artifacts(str(directory), artifact_path))

    def log_inputs(self, datasets: list[dict]) -> None:
        """MLflow dataset inputs: dicts of Dataset fields and the `context` they were used in."""
        self.delivery.put(Inputs(tuple(datasets)))

    def register_model(self, name: str, artifact_path: str) -> None:
        """A new version of registered model `name` from this run's logged MLflow model."""
        self.delivery.put(Register(name, artifact_path))

    def logged_steps(self, metric: str) -> set[int]:
        return {m.step for m in self.client.get_metric_history(self.run_id, metric)}

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

    # ------------------------------------------------------------ lifecycle

    def deliver_spool(self) -> int:
        """Writes an earlier launch in this run dir could not deliver: send them first, in order."""
        if self.spool is None:
            return 0
        count = self.spool.deliver(self.client)
        if not count:
            return 0
        if self.resumed:  # the earlier launch's final status was among them; this launch goes on
            with_retry(self.client.update_run, self.run_id, status="RUNNING")
        self._read_held()  # the delivered points are the run's too
        print(f"Delivered {count} MLflow write(s) kept by an earlier launch during a tracking outage.", flush=True)
        return count

    def flush(self) -> None:
        """Wait until every write so far is delivered (or an outage keeps them); raise what MLflow refused."""
        self.delivery.flush()

    def end(self, status: str = "FINISHED") -> None:
        """Mark the run, its console so far beside it; during an outage wait up to `outage_wait` s, then leave the
        rest in the run dir."""
        if self._system is not None:
            self._system.finish()
            self._system = None
        console = self.run_dir / CONSOLE_FILE if self.run_dir is not None else None
        if console is not None and console.exists():
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError, ValueError):  # a console whose reader is gone: the run still ends
                    stream.flush()
            self.delivery.put(Artifact(str(console), None), check=False)
        self.delivery.put(Terminate(status), check=False)
        left = self.delivery.close(self.outage_wait)
        if left:
            self._keep(left)
        refused = self.delivery.take_refusal()
        if refused is not None:
            print(f"WARNING: MLflow refused a write of run {self.run_id}: {refused}", file=sys.stderr, flush=True)

    def _keep(self, left: list[Write]) -> None:
        points = sum(len(w.items) for w in left if isinstance(w, Metrics))
        if self.spool is None:
            print(
                f"WARNING: {len(left)} MLflow write(s) ({points} metric points) could not be delivered "
                f"to {redact(self.uri)} and are lost (no run dir to keep them in).",
                file=sys.stderr,
                flush=True,
            )
            return
        self.spool.keep(self.run_id, left)
        print(
            f"WARNING: the tracking server {redact(self.uri)} did not come back within tracking.outage_wait="
            f"{self.outage_wait:g}s: {len(left)} write(s) ({points} metric points) kept in "
            f"{self.spool.path}.\n  Deliver them when it is up: python -m launcher.tracking.sync "
            f"{self.spool.path.parent}  (a resume in this run dir delivers them too)",
            file=sys.stderr,
            flush=True,
        )

    @property
    def ui_hint(self) -> str:
        """Where the person opens this run: its page in MLflow's UI (and, for a local store, the command that
        serves it)."""
        return MlflowUi.of(self.uri).run_hint(self.experiment_id, self.run_id)


ARTIFACTS = "mlartifacts"


def artifact_root(resolved_uri: str, launch_dir: Path) -> Path:
    """Where a new experiment in a local store keeps its artifacts: beside a SQLite file, so the store and its
    artifacts stay together wherever the launch ran from (the default `sqlite:///outputs/mlflow.db` gives
    <launch dir>/outputs/mlartifacts); under <launch dir>/outputs for any other local store."""
    if resolved_uri.startswith("sqlite:///"):
        return Path(resolved_uri[len("sqlite:///") :]).parent / ARTIFACTS
    return launch_dir / "outputs" / ARTIFACTS


def run_dir_run(client, run_dir: Path) -> str | None:
    """The MLflow run a run dir's launches wrote to: the one it remembers, or the one a launch killed while
    creating it made (found by its creation token) - the newer of the two."""
    from mlflow.exceptions import MlflowException

    pending = pending_creation(run_dir)
    if pending is not None:
        try:
            found = with_retry(
                client.search_runs,
                [pending.experiment_id],
                filter_string=f"tags.`{CREATION_TAG}` = '{pending.token}'",
                max_results=1,
            )
        except MlflowException:  # another store, or the experiment is gone
            found = []
        if found:
            return found[0].info.run_id
    return remembered_run(run_dir)


def open_run(
    uri: str,
    launch_dir: Path,
    experiment: str,
    run_name: str,
    *,
    run_dir: Path | None = None,
    resume_run_id: str | None = None,
    parent_run_id: str | None = None,
    outage_wait: float = 0.0,
    remember: bool = False,
    params: dict[str, Any] | None = None,
    tags: dict[str, str] | None = None,
) -> Tracker:
    """The one way a launch, an evaluation, a doctor or a sweep opens its MLflow run: the URI resolved against
    the launch directory, a local store's artifacts where `artifact_root` says."""
    resolved = resolve_uri(uri, launch_dir)
    return Tracker(
        resolved,
        experiment,
        run_name,
        artifact_root(resolved, launch_dir),
        resume_run_id,
        parent_run_id=parent_run_id,
        run_dir=run_dir,
        outage_wait=outage_wait,
        remember=remember,
        params=params,
        tags=tags,
    )


class NullTracker:
    """tracking.enabled=false, or a worker that is not the chief: every write goes nowhere."""

    run_id = None
    uri = ""
    resumed = False
    adopted = False
    decision = None
    held = HeldPoints()
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

    def log_inputs(self, datasets):
        pass

    def register_model(self, name, artifact_path):
        pass

    def logged_steps(self, metric):
        return set()

    def start_system_metrics(self, interval):
        pass

    def deliver_spool(self):
        return 0

    def flush(self):
        pass

    def end(self, status="FINISHED"):
        pass
