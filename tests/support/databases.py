"""A real PostgreSQL server on 127.0.0.1 for the tests that share an Optuna study through a database: the
operating system's package (Debian's `postgresql`), a cluster made in a temporary folder, a password login."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from launcher.supervise.local_workers import free_ports

PASSWORD = "s3cret-pg"  # asserted absent from everything the launcher shows or logs


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def _as_owner(command: list[str], owner: str | None) -> list[str]:
    """PostgreSQL refuses to run as root: as root, its commands run as the `postgres` user."""
    return ["runuser", "-u", owner, "--", *command] if owner else command


@pytest.fixture
def postgres() -> str:
    """The URL of a fresh PostgreSQL database (user `launcher`, password PASSWORD) on 127.0.0.1; the server
    stops after the test. Skipped where PostgreSQL is not installed, unless LAUNCHER_REQUIRE_POSTGRES=1 (CI)."""
    binaries = _binaries()
    if binaries is None:
        if os.environ.get("LAUNCHER_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL is required (LAUNCHER_REQUIRE_POSTGRES=1): apt-get install postgresql")
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    # Not under pytest's tmp dir: its parent is private to this user, and the server runs as `postgres`.
    folder = Path(tempfile.mkdtemp(prefix="launcher-pg-"))
    owner = "postgres" if os.geteuid() == 0 else None
    data = folder / "data"
    password_file = folder / "password"
    password_file.write_text(PASSWORD + "\n")
    if owner:
        shutil.chown(folder, owner)
        shutil.chown(password_file, owner)
    subprocess.run(
        _as_owner(
            [
                str(binaries / "initdb"),
                "-D",
                str(data),
                "-U",
                "launcher",
                f"--pwfile={password_file}",
                "--auth=scram-sha-256",
                "--no-sync",
            ],
            owner,
        ),
        check=True,
        capture_output=True,
    )
    port = free_ports(1)[0]
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {folder} -c fsync=off"
    subprocess.run(
        _as_owner(
            [str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "start"], owner
        ),
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://launcher:{PASSWORD}@127.0.0.1:{port}/postgres"
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            subprocess.run(
                _as_owner([str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], owner),
                check=True,
                capture_output=True,
            )
        shutil.rmtree(folder, ignore_errors=True)
