"""A new local SQLite store made whole in one go, without a disk sync per schema migration.

MLflow's first open of a new SQLite store runs its schema migrations, each committed with its own syncs: 1,084
`fdatasync` calls for a store that holds nothing yet, 4-6 s of a first launch's wall time on a virtual disk (the
first `python -m launcher debug=fast` in a new directory). Here the migrations run in a file beside the store with
SQLite's syncs off, the file is synced once and linked into place: a crash leaves no half-made store (a stray
`*.new-<pid>` file at most), and when two processes make the same store at once the first link wins and both use it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def sqlite_path(uri: str) -> Path | None:
    """The file of an absolute `sqlite:////path` URI, else None (a server, a file store, a relative path)."""
    if not uri.startswith("sqlite:////"):
        return None
    return Path(uri[len("sqlite:///") :].split("?", 1)[0])


def make_new_store(uri: str) -> bool:
    """Make the SQLite store at `uri` when there is none yet (see the module); True when this process made it."""
    path = sqlite_path(uri)
    if path is None or path.exists() or not path.parent.is_dir():
        return False
    import sqlalchemy
    from mlflow.tracking import MlflowClient

    aside = path.with_name(f"{path.name}.new-{os.getpid()}")
    opened = []  # the connections to the store being made: unsynced, and closed once it is made

    def unsynced(connection, _record) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA database_list")
        if str(aside) in [row[2] for row in cursor.fetchall()]:
            cursor.execute("PRAGMA synchronous = OFF")
            cursor.execute("PRAGMA journal_mode = MEMORY")
            opened.append(connection)
        cursor.close()

    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "connect", unsynced)
    try:
        MlflowClient(f"sqlite:///{aside}").search_experiments(max_results=1)
    finally:
        sqlalchemy.event.remove(sqlalchemy.engine.Engine, "connect", unsynced)
        for connection in opened:  # MLflow keeps its store for that URI cached: no file held open by it
            with contextlib.suppress(Exception):
                connection.close()
    try:
        with open(aside, "rb+") as made:
            os.fsync(made.fileno())
        os.link(aside, path)  # never over a store another process made meanwhile
    except OSError:  # made meanwhile, or a filesystem without hard links: MLflow makes it as it always did
        return False
    finally:
        with contextlib.suppress(OSError):
            aside.unlink()
    with contextlib.suppress(OSError):  # the link is made; a directory that cannot be synced keeps it anyway
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    return True
