"""Credentials in a tracking URI never reach params, files, tags, messages or the console."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.config import TINY
from support.tracking import SHARED_SERVER_GROUP, free_port

from launcher.config.errors import ConfigError
from launcher.tracking.uri import check_reachable, redact


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("https://alice:s3cret@mlflow.example.com:5000", "https://alice:***@mlflow.example.com:5000"),
        ("https://tok3n@mlflow.example.com", "https://***@mlflow.example.com"),
        ("https://mlflow.example.com/api?token=s3cret&x=1", "https://mlflow.example.com/api?token=***&x=1"),
        ("databricks://profile?access_key=s3cret", "databricks://profile?access_key=***"),
        ("sqlite:////tmp/outputs/mlflow.db", "sqlite:////tmp/outputs/mlflow.db"),
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
    ],
)
def test_redact_hides_passwords_and_tokens_only(uri, shown):
    assert redact(uri) == shown


def test_an_unreachable_server_error_does_not_print_the_password():
    uri = f"http://alice:s3cret@127.0.0.1:{free_port()}"
    with pytest.raises(ConfigError) as err:
        check_reachable(uri, timeout=2)
    assert "s3cret" not in str(err.value)
    assert "alice:***@127.0.0.1" in str(err.value)
    # The fix names this URI's own port (it said --port 5000 whatever the URI) and the way to go on without it.
    (problem,) = err.value.violations
    port = uri.rsplit(":", 1)[1]
    assert problem.fix.startswith(f"start it (mlflow server --host 127.0.0.1 --port {port})")
    assert "tracking.on_unreachable=local" in problem.fix
    from launcher.tracking.uri import _unreachable_fix

    remote = _unreachable_fix("https://bob:pw@mlflow.example.com/api")
    assert remote.startswith("check that the server at mlflow.example.com:443 is up") and "pw" not in remote


@pytest.mark.xdist_group(SHARED_SERVER_GROUP)
def test_a_run_against_a_server_with_credentials_in_its_uri_shows_them_nowhere(
    cli_here, tmp_path, shared_mlflow_server
):
    """The server ignores basic auth; the launcher must still never write or print the password."""
    url, _artifacts = shared_mlflow_server
    with_credentials = url.replace("http://", "http://alice:s3cret@")
    done = cli_here(*TINY, "train.epochs=1", f"tracking.uri={with_credentials}", "tracking.experiment=credentials")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "s3cret" not in done.stdout + done.stderr
    assert "alice:***@" in done.stdout  # the run's URL, credentials hidden
    run_dir = tmp_path / "run"
    for path in (run_dir / "config.yaml", run_dir / "plan.yaml", run_dir / "outcome.json"):
        assert "s3cret" not in path.read_text(), path

    from mlflow.tracking import MlflowClient

    client = MlflowClient(url)
    (run,) = client.search_runs([client.get_experiment_by_name("credentials").experiment_id])
    assert run.data.params["tracking.uri"] == with_credentials.replace("s3cret", "***")
    assert not [k for k, v in {**run.data.params, **run.data.tags}.items() if "s3cret" in v]
    config_artifact = client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path / "dl"))
    assert "s3cret" not in Path(config_artifact).read_text()


def test_a_failed_sweep_child_shows_its_overrides_without_credentials():
    from launcher.sweep.job import _shown

    assert _shown("tracking.uri=https://alice:s3cret@host") == "tracking.uri=https://alice:***@host"
    assert _shown("+tracking.uri=https://host?token=s3cret") == "+tracking.uri=https://host?token=***"
    assert _shown("optimizer.learning_rate=0.01") == "optimizer.learning_rate=0.01"
