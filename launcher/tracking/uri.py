"""Where a run is tracked: the store's URI made absolute, a server that answers, credentials hidden.

An unreachable tracking server fails fast with a `ConfigError` instead of MLflow's
minutes of retries. A URI may carry credentials (`https://user:password@host`,
`?token=...`): `redact` is what every param, file, message and hint shows instead.
"""

from __future__ import annotations

import base64
import fcntl
import re
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from launcher.config.errors import ConfigError
from launcher.tracking.new_store import make_new_store

HIDDEN = "***"
SECRET_QUERY_KEYS = re.compile(r"token|secret|password|passwd|key|auth|signature|credential", re.IGNORECASE)


def redact(uri: str) -> str:
    """The URI with its password (or bare token) and secret-looking query values replaced by ***;
    everything else exactly as given."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return uri
    shown = uri
    if "@" in parts.netloc:
        userinfo, host = parts.netloc.rsplit("@", 1)
        user, has_password, _ = userinfo.partition(":")
        shown = shown.replace(parts.netloc, f"{user}:{HIDDEN}@{host}" if has_password else f"{HIDDEN}@{host}", 1)
    if parts.query:
        pairs = [_hide_value(pair) for pair in parts.query.split("&")]
        shown = shown.replace(f"?{parts.query}", "?" + "&".join(pairs), 1)
    return shown


def _hide_value(pair: str) -> str:
    key, has_value, _ = pair.partition("=")
    return f"{key}={HIDDEN}" if has_value and SECRET_QUERY_KEYS.search(key) else pair


def resolve_uri(uri: str, base: Path) -> str:
    """Make a relative sqlite/file URI absolute against the launch directory."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        path = (base / uri[len("sqlite:///") :]).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{path}"
    if "://" not in uri:
        return (base / uri).resolve().as_uri()
    return uri


def initialise_store(uri: str) -> None:
    """A local SQLite store made (its tables created) by one process at a time: several sweepers or launches
    starting together on a new store would each create the tables, and all but one fail."""
    if not uri.startswith("sqlite:///"):
        return
    from mlflow.tracking import MlflowClient

    path = Path(uri[len("sqlite:///") :].split("?", 1)[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        make_new_store(uri)
        MlflowClient(uri).search_experiments(max_results=1)


def check_reachable(uri: str, timeout: float = 5.0) -> None:
    """Fail fast with a ConfigError instead of MLflow's minutes of retries."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        urllib.request.urlopen(_health_request(uri), timeout=timeout).read()
    except OSError as err:
        raise ConfigError.single(
            "tracking.uri",
            redact(uri),
            f"a reachable MLflow tracking server ({redact(str(err))})",
            _unreachable_fix(uri),
        ) from None


def _unreachable_fix(uri: str) -> str:
    """What brings a server that does not answer back, for this URI's own host and port; or how to go on without."""
    parts = urlsplit(uri)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if host in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
        first = f"start it (mlflow server --host {host} --port {port})"
    else:
        first = f"check that the server at {host}:{port} is up and reachable from this machine"
    return (
        f"{first}; or tracking.on_unreachable=local to log to tracking.fallback_uri instead; or tracking=mlflow "
        "for the local SQLite store; or tracking=off"
    )


def _health_request(uri: str) -> urllib.request.Request:
    """GET <server>/health; credentials in the URI go in a Basic auth header, as MLflow's client sends
    them (urllib would take `user:password@host` for a host name)."""
    parts = urlsplit(uri)
    host = parts.netloc.rsplit("@", 1)[-1]
    request = urllib.request.Request(urlunsplit((parts.scheme, host, parts.path.rstrip("/") + "/health", "", "")))
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        request.add_header("Authorization", "Basic " + base64.b64encode(pair.encode()).decode())
    return request
