"""One search pulled by several sweepers: the study they share names the sweep and its one MLflow parent run.

A search whose `hydra.sweeper.storage` is given may be started by several sweepers (machines, array jobs, or
twice on one machine) with the same command. The first to create the study in that storage (the database
decides: a study's name is unique) gives it a sweep id and opens the parent run; the others read both from the
study. Each trial records the sweeper that told the study how it ended, so that when the study is done the
sweeper that ended its last trial, and only it, summarises the parent.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from omegaconf import DictConfig

from launcher.config.study_storage import DEFAULT_STUDY, open_storage, study_name
from launcher.config.tasks import objective
from launcher.sweep.summary import sweep_goal
from launcher.tracking.uri import redact

SWEEP_ID, PARENT = "launcher.sweep_id", "launcher.parent"  # study user attributes
TOLD_BY = "launcher.told_by"  # trial system attribute: the sweeper that told the study how the trial ended
# This process, as trials record it (containers may share a host name and a pid).
SWEEPER = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
WAIT = 60.0  # seconds a sweeper waits for the study's creator to record the sweep id and parent run


@dataclass(frozen=True)
class SharedStudy:
    """A search's study in a storage several sweepers may share."""

    storage: str
    name: str

    @classmethod
    def of(cls, node: DictConfig) -> SharedStudy | None:
        """The shared study `node` searches, None for a plain multirun or a study private to its sweep dir."""
        sweeper = node.hydra.sweeper
        if not str(sweeper.get("_target_", "")).endswith("SearchSweeper") or not sweeper.get("storage"):
            return None
        name = study_name(str(sweeper.get("study_name") or DEFAULT_STUDY), str(node.get("name") or ""), True)
        return cls(str(sweeper.storage), name)

    def join(self, node: DictConfig) -> tuple[str, bool]:
        """The sweep id the study carries, and whether this sweeper created the study (it opens the parent)."""
        from optuna.exceptions import DuplicatedStudyError
        from optuna.study import StudyDirection

        storage = open_storage(self.storage)
        sweeper = node.hydra.sweeper
        directions = sweep_goal(sweeper.get("objectives"), sweeper.get("direction"), objective(node))[1]
        try:
            study_id = storage.create_new_study([StudyDirection[d.upper()] for d in directions], self.name)
        except DuplicatedStudyError:
            study_id = storage.get_study_id_from_name(self.name)
            found = _awaited(lambda: storage.get_study_user_attrs(study_id).get(SWEEP_ID))
            if found is not None:
                return str(found), False
            # A study made before the launcher named its sweeps (or by Optuna directly): this sweeper names it.
        sweep_id = uuid.uuid4().hex[:12]
        storage.set_study_user_attr(study_id, SWEEP_ID, sweep_id)
        return sweep_id, True

    def recorded_parent(self, uri: str, creator: bool) -> str | None:
        """The parent run the creator recorded for tracking store `uri` (waited for, unless this is the
        creator); None when there is none for this store."""
        storage = open_storage(self.storage)
        study_id = storage.get_study_id_from_name(self.name)

        def read():
            return storage.get_study_user_attrs(study_id).get(PARENT)

        parent = read() if creator else _awaited(read)
        if parent and parent.get("uri") == redact(uri):
            return str(parent["run_id"])
        return None

    def record_parent(self, uri: str, run_id: str) -> None:
        storage = open_storage(self.storage)
        study_id = storage.get_study_id_from_name(self.name)
        storage.set_study_user_attr(study_id, PARENT, {"uri": redact(uri), "run_id": run_id})

    def summarised_here(self) -> bool:
        """Whether this sweeper ended the study's last trial (the study done: nothing running or queued)."""
        trials = self._trials()
        if not trials or not _done(trials):
            return False
        told = [t for t in trials if TOLD_BY in t.system_attrs]  # not the ones failed for a dead sweeper
        if not told:
            return False
        last = max(told, key=lambda t: (t.datetime_complete.timestamp() if t.datetime_complete else 0, t.number))
        return last.system_attrs[TOLD_BY] == SWEEPER

    def summarises(self, uri: str, parent_run_id: str) -> bool:
        """Whether this sweeper summarises the parent: it ended the study's last trial, or it finds the study done
        and the parent still RUNNING without having run a trial itself (the one that should have died first)."""
        if self.summarised_here():
            return True
        trials = self._trials()
        if not trials or not _done(trials) or any(t.system_attrs.get(TOLD_BY) == SWEEPER for t in trials):
            return False
        from mlflow.tracking import MlflowClient

        return MlflowClient(uri).get_run(parent_run_id).info.status == "RUNNING"

    def study(self):
        """The study, loaded (for its report)."""
        import optuna

        return optuna.load_study(study_name=self.name, storage=open_storage(self.storage))

    def _trials(self) -> list:
        import optuna

        return optuna.load_study(study_name=self.name, storage=open_storage(self.storage)).get_trials(deepcopy=False)


def _done(trials) -> bool:
    from optuna.trial import TrialState

    return not any(t.state in (TrialState.RUNNING, TrialState.WAITING) for t in trials)


def _awaited(read: Callable[[], object]):
    """What the study's creator records, once it has (it is a moment behind a sweeper started with it); None
    after WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while (found := read()) is None and time.monotonic() < deadline:
        time.sleep(0.5)
    return found


SURPLUS = "launcher.surplus"  # trial user attribute: asked past n_trials by a sweeper racing another, never run


def counted(study) -> list:
    """The study's trials that count towards n_trials: not one failed for a dead sweeper and queued again (its
    retry counts instead), not a surplus ask."""
    trials = study.get_trials(deepcopy=False)
    replaced = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
    return [t for t in trials if SURPLUS not in t.user_attrs and not (t.number in replaced and t.state.is_finished())]


def is_surplus(study, trial, total: int) -> bool:
    """Whether `trial`, just asked, is past the study's `total` (two sweepers asked the last one at once); if so it
    is failed at once, marked, and never counted or run."""
    from optuna.trial import TrialState

    if retried_from(trial) is not None:
        return False
    before = [t for t in counted(study) if t.number <= trial.number]
    if len(before) <= total:
        return False
    trial.set_user_attr(SURPLUS, True)
    study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
    return True


def retried_from(trial) -> int | None:
    """The number of the trial this one runs again (its sweeper died), None for a trial asked afresh."""
    frozen = next(t for t in trial.study.get_trials(deepcopy=False) if t.number == trial.number)
    return frozen.system_attrs.get("failed_trial")


def _trial_id(storage, study, number: int) -> int:
    return storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study.study_name), number)


def tell_told(storage, study, number: int, **how) -> None:
    """Tell the study how trial `number` ended, recording this sweeper as its teller; a trial another sweeper
    failed meanwhile (this one's heartbeat was late: its retry runs it again) is left as it is."""
    from optuna.exceptions import UpdateFinishedTrialError

    try:
        storage.set_trial_system_attr(_trial_id(storage, study, number), TOLD_BY, SWEEPER)
    except UpdateFinishedTrialError:
        print(f"Trial {number} was failed meanwhile by another sweeper (no heartbeat in time): not told.", flush=True)
        return
    study.tell(number, skip_if_finished=True, **how)


def beat_once(storage, study, number: int) -> None:
    """A heartbeat for trial `number` now (Optuna's database storage never finds a trial stale that has none)."""
    storage.record_heartbeat(_trial_id(storage, study, number))


@contextlib.contextmanager
def beating(storage, study, numbers: list[int]):
    """Heartbeats for `numbers` while their jobs run (none without a heartbeat storage): other sweepers leave a
    beating trial alone."""
    if storage is None or storage.get_heartbeat_interval() is None:
        yield
        return
    ids = [_trial_id(storage, study, n) for n in numbers]
    stop = threading.Event()

    def beat() -> None:
        while True:
            for trial_id in ids:
                with contextlib.suppress(Exception):  # a trial failed meanwhile; a database hiccup: next beat
                    storage.record_heartbeat(trial_id)
            if stop.wait(storage.get_heartbeat_interval()):
                return

    thread = threading.Thread(target=beat, name="study heartbeat", daemon=True)  # joined below, in any case
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def fail_stale(study) -> list[int]:
    """Fail the trials whose sweeper stopped beating (each queued again by the storage's retry callback); their
    numbers."""
    import optuna
    from optuna.trial import TrialState

    def running() -> set[int]:
        return {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}

    before = running()
    optuna.storages.fail_stale_trials(study)
    failed = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))}
    return sorted((before - running()) & failed)


def quiet_heartbeat_warnings() -> None:
    """Optuna marks its heartbeat API experimental and warns when it is used outside `optimize`: the search uses
    it on purpose, from ask and tell."""
    from optuna.exceptions import ExperimentalWarning

    warnings.filterwarnings("ignore", category=ExperimentalWarning)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
