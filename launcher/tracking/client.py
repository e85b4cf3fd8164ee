"""MLflow's client as the launcher calls it: retried on a locked SQLite store, one attempt against a dead server.

SQLite allows one writer at a time, so parallel sweep jobs retry a locked database; a server that does not
answer is an outage (the Tracker keeps the writes), one that answers and refuses is an error.
"""

from __future__ import annotations

import os
import time

from launcher.config.errors import ConfigError
from launcher.tracking.links import EXPERIMENT_KIND
from launcher.tracking.new_store import make_new_store

PARAM_LIMIT = 500  # MLflow's value length limits
TAG_LIMIT = 5000
BATCH_LIMIT = 100  # params or tags per log_batch call
METRIC_BATCH = 1000  # metric points per log_batch call
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


# SQLite errors a retry resolves: the database locked by another writer, or a parallel job inserting the same
# dataset row first (MLflow inserts a dataset it did not find; on retry it finds it and only links it).
RETRYABLE = ("database is locked", "UNIQUE constraint failed: datasets.")


def with_retry(call, *args, attempts: int = 8, **kwargs):
    """`call(*args, **kwargs)`, retried with backoff while SQLite says the database is locked (or a parallel job
    won the race to insert the same dataset)."""
    for attempt in range(attempts):
        try:
            return call(*args, **kwargs)
        except Exception as err:
            if not any(sign in str(err) for sign in RETRYABLE) or attempt == attempts - 1:
                raise
            time.sleep(0.2 * 2**attempt)


def experiment_id(client, name: str, artifact_location: str | None) -> str:
    """The experiment's id, created when missing (of the model-training kind, so MLflow's UI opens its runs
    table); a locked database is retried, and a parallel job that created it first is no error."""
    key, kind = EXPERIMENT_KIND
    found = with_retry(client.get_experiment_by_name, name)
    if found is not None:
        if key not in found.tags:  # made before the launcher set it; a kind someone chose is kept
            with_retry(client.set_experiment_tag, found.experiment_id, key, kind)
        return found.experiment_id
    try:
        return with_retry(client.create_experiment, name, artifact_location=artifact_location, tags={key: kind})
    except Exception:
        found = with_retry(client.get_experiment_by_name, name)
        if found is None:
            raise
        return found.experiment_id


def check_experiment_active(uri: str, name: str) -> None:
    """Refuse an experiment deleted in MLflow before anything is built: no run can be created in it, and MLflow keeps
    its name (so it cannot be made again) until it is purged."""
    from mlflow.tracking import MlflowClient

    make_new_store(uri)  # a first launch on a new local store: made without a disk sync per migration
    found = with_retry(MlflowClient(uri).get_experiment_by_name, name)
    if found is None or found.lifecycle_stage != "deleted":
        return
    raise ConfigError.single(
        "tracking.experiment",
        name,
        f"an active MLflow experiment (experiment {found.experiment_id} of that name was deleted; MLflow keeps its "
        "name, and every run in it, until it is purged)",
        f"restore it (mlflow experiments restore --experiment-id {found.experiment_id}), or "
        "tracking.experiment=<another name>",
    )


def is_outage(err: BaseException) -> bool:
    """The server did not answer (as opposed to refusing a request it understood)."""
    return isinstance(err, ConnectionError) or any(sign in str(err) for sign in OUTAGE_SIGNS)


def quiet_client() -> None:
    """MLflow's client retries a dead server for minutes per call by default; the Tracker keeps the writes
    itself, so one attempt is enough. No progress bars, and no server URL printed with its credentials."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
