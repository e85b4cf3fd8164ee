"""Where a run is tracked: the store's URI made absolute, and a server that answers.

An unreachable tracking server fails fast with a `ConfigError` instead of MLflow's
minutes of retries.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

from launcher.config.errors import ConfigError


def resolve_uri(uri: str, base: Path) -> str:
    """Make a relative sqlite/file URI absolute against the launch directory."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        path = (base / uri[len("sqlite:///"):]).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{path}"
    if "://" not in uri:
        return (base / uri).resolve().as_uri()
    return uri


def check_reachable(uri: str, timeout: float = 5.0) -> None:
    """Fail fast with a ConfigError instead of MLflow's minutes of retries."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout).read()
    except OSError as err:
        raise ConfigError.single(
            "tracking.uri", uri, f"a reachable MLflow tracking server ({err})",
            "start it (mlflow server --host 127.0.0.1 --port 5000), or tracking=mlflow for the local "
            "SQLite store, or tracking=off",
        ) from None
