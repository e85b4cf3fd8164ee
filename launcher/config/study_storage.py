"""Where an Optuna study lives: `hydra.sweeper.storage` checked, then opened as the storage Optuna has for it.

It takes what Optuna takes: a database URL (`sqlite:///`, `postgresql://`, `mysql://`, any SQLAlchemy URL) opens
an `RDBStorage`, `journal:///shared/study.log` a `JournalStorage` on that file (Optuna's advice for a study on
NFS). The sweeper opens it with a heartbeat so that several sweepers can share one study: each beats for the
trials it runs, and a trial whose sweeper stopped beating (killed, machine gone) is failed by the next sweeper
that looks and queued again with the same values. Optuna's journal storage has no heartbeat of its own; the one
here keeps the last beat on the trial, in the journal, so it needs the machines' clocks to agree within the
grace period.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from launcher.config.errors import ConfigError, Violation

JOURNAL = "journal://"
BEAT = "launcher.heartbeat"  # the journal's last beat of a running trial (a trial system attribute)
KEY = "hydra.sweeper.storage"
# The package of each database driver SQLAlchemy may pick (postgresql:// is psycopg, version 3, in SQLAlchemy 2.1).
DRIVERS = {"psycopg": "psycopg[binary]", "psycopg2": "psycopg2-binary", "pymysql": "pymysql", "mysqldb": "mysqlclient"}
FORMS = "a database URL (sqlite:///path.db, postgresql://user:password@host/db, mysql://...) or journal:///path.log"


DEFAULT_STUDY = "launcher"  # hydra.sweeper.study_name's default
SEARCH = "launcher.search"  # study user attribute: what the study searches, for a joiner to compare with


def study_name(configured: str, sweep_name: str, shared: bool) -> str:
    """The study's name: on a shared storage a search named `name=s1` is study `s1` unless one is given, so two
    searches on one database never pull from each other's study; a study of its own keeps `launcher`."""
    if shared and configured == DEFAULT_STUDY and sweep_name:
        return sweep_name
    return configured


@dataclass(frozen=True)
class Heartbeat:
    """How sweepers sharing a study tell a live trial from one whose sweeper died."""

    interval: int  # seconds between a sweeper's beats for each trial it runs
    grace_period: int  # seconds without a beat after which another sweeper fails the trial and queues it again
    retries: int  # how many times one trial is queued again


def journal_path(url: str, base: Path | None = None) -> Path | None:
    """The file of a journal storage URL (relative paths against `base`), None for any other URL."""
    if not url.startswith(JOURNAL):
        return None
    path = Path(url[len(JOURNAL) :]).expanduser()
    return path if path.is_absolute() or base is None else base / path


def sqlite_path(url: str) -> Path | None:
    """The database file of a SQLite URL, None for any other (or an in-memory one)."""
    if not url.startswith("sqlite:///") or url == "sqlite:///:memory:":
        return None
    return Path(url[len("sqlite:///") :].split("?", 1)[0])


def storage_problems(url: str) -> list[Violation]:
    """What stops `url` from opening: a form Optuna has no storage for, or a database driver not installed."""
    if url.startswith(JOURNAL):
        if not url[len(JOURNAL) :].strip():
            return [Violation(KEY, url, FORMS, "hydra.sweeper.storage=journal:///shared/folder/study.log")]
        return []
    import sqlalchemy
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = sqlalchemy.engine.make_url(url)
        dialect = parsed.get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError) as why:
        return [
            Violation(KEY, shown(url), f"{FORMS} ({why})", "hydra.sweeper.storage=journal:///shared/folder/study.log")
        ]
    try:
        dialect.import_dbapi()
    except ImportError as missing:
        driver = parsed.get_driver_name()
        package = DRIVERS.get(driver, driver)
        return [Violation(KEY, url, f"{FORMS}, with its driver installed ({missing})", f"pip install '{package}'")]
    return []


def open_storage(url: str, heartbeat: Heartbeat | None = None):
    """The Optuna storage `url` names; with `heartbeat`, one on which stale trials are failed and queued again.
    SQLite waits for its lock instead of failing, as parallel trials write to it."""
    import optuna

    retry = optuna.storages.RetryHeartbeatStaleTrialCallback
    beats = (
        {}
        if heartbeat is None
        else {
            "heartbeat_interval": heartbeat.interval,
            "grace_period": heartbeat.grace_period,
            "heartbeat_stale_trial_callback": retry(max_retry=heartbeat.retries),
        }
    )
    path = journal_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        backend = optuna.storages.journal.JournalFileBackend(str(path))
        if heartbeat is None:
            return optuna.storages.JournalStorage(backend)
        return _beating_journal()(backend, heartbeat, beats["heartbeat_stale_trial_callback"])
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite:") else {"pool_pre_ping": True}
    from sqlalchemy.exc import OperationalError

    try:
        return _first_open(lambda: optuna.storages.RDBStorage(url, engine_kwargs=engine, **beats))
    except OperationalError as err:  # no server there, a wrong password, a database that does not exist
        reason = " ".join(str(err.orig or err).split())[:300]
        raise ConfigError.single(
            KEY,
            shown(url),
            f"a database that answers ({reason})",
            "start it or correct the URL; a journal file needs no server: "
            "hydra.sweeper.storage=journal:///shared/folder/study.log",
        ) from None


def shown(url: str) -> str:
    """The URL as messages show it: a database URL's password as ***."""
    if url.startswith(JOURNAL):
        return url
    import sqlalchemy

    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy reads: nothing in it is a password it knows of
        return url


def _first_open(make, attempts: int = 5):
    """An RDB storage opened by several sweepers at once: Optuna creates its tables on first open, and all but
    one of the processes creating them together fail (a duplicate table or type); they open the made ones."""
    from sqlalchemy.exc import DBAPIError

    for attempt in range(attempts):
        try:
            return make()
        except DBAPIError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


_JOURNAL_CLASS: list[type] = []


def _beating_journal() -> type:
    """A journal storage with a heartbeat (made once, on first use: Optuna is imported only by searches)."""
    if _JOURNAL_CLASS:
        return _JOURNAL_CLASS[0]
    import optuna
    from optuna.storages._heartbeat import BaseHeartbeat
    from optuna.trial import TrialState

    class BeatingJournal(optuna.storages.JournalStorage, BaseHeartbeat):
        """Optuna's journal storage, its trials' beats kept as a system attribute of each (a line per beat)."""

        def __init__(self, backend, heartbeat: Heartbeat, on_stale) -> None:
            super().__init__(backend)
            self._heartbeat, self._on_stale = heartbeat, on_stale

        def record_heartbeat(self, trial_id: int) -> None:
            self.set_trial_system_attr(trial_id, BEAT, time.time())

        def _get_stale_trial_ids(self, study_id: int) -> list[int]:
            stale = []
            now = time.time()
            for trial in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
                started = trial.datetime_start.timestamp() if trial.datetime_start else now
                # A queued-again trial carries its first run's beats: it lives from its own start.
                last = max(float(trial.system_attrs.get(BEAT, 0.0)), started)
                if now - last > self._heartbeat.grace_period:
                    stale.append(trial._trial_id)
            return stale

        def get_heartbeat_interval(self) -> int | None:
            return self._heartbeat.interval

        def get_heartbeat_stale_trial_callback(self):
            return self._on_stale

    _JOURNAL_CLASS.append(BeatingJournal)
    return BeatingJournal
