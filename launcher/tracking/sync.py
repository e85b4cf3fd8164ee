"""`python -m launcher.tracking.sync <run dir> [--uri URI]`: deliver what a tracking outage left behind.

A launch whose tracking server did not come back within `tracking.outage_wait` keeps its
undelivered MLflow writes (metrics, tags, artifacts, the final status) in the run dir's
`tracking_pending.jsonl`, in order. This sends them to the run they belong to.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from launcher.tracking.client import is_outage
from launcher.tracking.spool import PENDING_FILE, deliver_file
from launcher.tracking.uri import HIDDEN, redact, resolve_uri


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launcher.tracking.sync", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="the run dir holding tracking_pending.jsonl")
    parser.add_argument("--uri", help="tracking URI (default: the run's tracking.uri from its config.yaml)")
    args = parser.parse_args(argv)
    spool = args.run_dir / PENDING_FILE
    if not spool.exists():
        print(f"Nothing to deliver: {spool} does not exist.")
        return 0
    uri = args.uri or _configured_uri(args.run_dir)
    if uri is None or HIDDEN in uri:
        print(
            f"error: give the tracking URI with --uri (the run's config.yaml has {uri!r}, credentials hidden)",
            file=sys.stderr,
        )
        return 2
    from mlflow.tracking import MlflowClient

    try:
        count = deliver_file(MlflowClient(resolve_uri(uri, Path.cwd())), spool)
    except Exception as err:
        if not is_outage(err):
            raise
        print(
            f"error: {redact(uri)} is still unreachable ({redact(str(err))[:200]}); nothing lost, "
            f"{spool} keeps what is not delivered. Try again later.",
            file=sys.stderr,
        )
        return 1
    print(f"Delivered {count} MLflow write(s) from {spool} to {redact(uri)}.")
    return 0


def _configured_uri(run_dir: Path) -> str | None:
    try:
        return yaml.safe_load((run_dir / "config.yaml").read_text())["tracking"]["uri"]
    except (OSError, KeyError, TypeError):
        return None


if __name__ == "__main__":
    sys.exit(main())
