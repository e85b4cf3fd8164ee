"""The sweep's parent MLflow run: opened before the first job, summarised after the last.

Hydra calls this callback in the sweep process (`hydra.callbacks` in conf/config.yaml).
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from launcher import forkserver
from launcher.config.errors import ConfigError, Violation
from launcher.config.study_storage import shown, storage_problems
from launcher.config.tasks import objective
from launcher.console import quiet_tracking_logs
from launcher.dirlock import SWEEP_LOCK_FILE, DirLock, Held, describe
from launcher.files import STOP_FILE, SWEEP_FILE, read_json, write_json_atomic
from launcher.outcome import EXIT_REFUSED
from launcher.sweep.champion import crown, goal_of
from launcher.sweep.job import stopped_by, swept_keys
from launcher.sweep.search_report import SEARCH_DIR, write_report
from launcher.sweep.shared import SharedStudy
from launcher.sweep.space import flatten
from launcher.sweep.summary import summarise, sweep_goal
from launcher.tracking.client import check_experiment_active, with_retry
from launcher.tracking.tracker import open_run
from launcher.tracking.uri import check_reachable, initialise_store, resolve_uri


def _swept(node: DictConfig) -> list[str]:
    """The keys the jobs differ by: sweep overrides, and a search's space (nested keys flattened)."""
    params = node.hydra.sweeper.get("params") or {}
    space = flatten(OmegaConf.to_container(params) if OmegaConf.is_config(params) else params)
    return swept_keys(list(node.hydra.overrides.task)) + list(space)


started = False  # set once a sweep's callback runs in this process: Hydra composed its config


class SweepCallback(Callback):
    """Creates the parent MLflow run before the jobs start and summarises the sweep after. Hydra calls its hooks
    with the composed node as `config=`; inside, it is `node`."""

    _lock: DirLock | None = None  # the sweep dir's, while this sweeper runs (a sweep of its own)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global started
        started = True  # composed: what fails from here is the sweep's, not the config's
        try:
            self._start(config)
        except ConfigError as refused:  # a tracking server or study storage that cannot be used: said, nothing run
            print(f"\n{refused}\n", file=sys.stderr, flush=True)
            raise SystemExit(EXIT_REFUSED) from None

    def _start(self, node: DictConfig) -> None:
        if not node.get("tf_logs", False):
            quiet_tracking_logs()
        if not str(node.hydra.launcher.get("_target_", "")).endswith("SlurmLauncher"):
            forkserver.share()  # jobs on this machine, whichever process starts them, fork from one server
        sweep_dir = Path(node.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        shared = SharedStudy.of(node)
        if shared is None:  # a sweep of its own: one sweeper at a time in its dir (a shared study takes several)
            self._hold(sweep_dir)
        previous = read_json(sweep_dir / SWEEP_FILE)
        if shared is not None:
            self._join(node, sweep_dir, shared, previous)
            return
        if previous and previous.get("sweep_id"):
            self._continue(node, sweep_dir, previous)
            return
        state = {"sweep_id": uuid.uuid4().hex[:12], "parent_run_id": None, "uri": None, "swept_keys": _swept(node)}
        uri = _reachable_uri(node) if node.tracking.enabled else None
        # The sweep exists before its parent run does: a sweep killed in between finds that run again when rerun.
        write_json_atomic(sweep_dir / SWEEP_FILE, state)
        if uri is not None:
            self._open_parent(node, sweep_dir, state, uri)

    def _hold(self, sweep_dir: Path) -> None:
        """The sweep dir's lock, held until this sweeper ends; another live sweeper's is refused (exit 2), before
        this one records anything: its jobs would be the other's."""
        self._lock = DirLock(sweep_dir, SWEEP_LOCK_FILE, "sweep")
        try:
            self._lock.acquire()
        except Held as held:
            refusal = Violation(
                "hydra.sweep.dir",
                str(sweep_dir),
                f"a sweep dir no other sweeper is using (this one is held by {describe(held.owner)})",
                "wait for it (the same command then continues the sweep), stop it, or give this sweep another "
                "name=; several sweepers share one search through a study storage: hydra.sweeper.storage="
                "journal:///shared/folder/study.log (docs/sweeps.md)",
            )
            print(ConfigError([refusal]), file=sys.stderr, flush=True)
            raise SystemExit(EXIT_REFUSED) from None

    def _join(self, node: DictConfig, sweep_dir: Path, shared: SharedStudy, previous: dict | None) -> None:
        """A search on a shared study: its sweep id and parent run are the study's, whichever sweeper made them. A
        joiner never changes the parent's status (its creator opened it; the sweeper that ends the last trial ends
        it), and a refused one never removes it (`withdraw`)."""
        if problems := storage_problems(shared.storage):  # said here: Hydra turns a callback's errors into warnings
            raise ConfigError(problems)
        sweep_id, creator = shared.join(node)
        print(
            f"Search {sweep_id}: study {shared.name!r} in {shown(shared.storage)} "
            + ("(created by this sweeper)" if creator else "(joined: other sweepers pull trials from it too)"),
            flush=True,
        )
        same = previous if previous and previous.get("sweep_id") == sweep_id else {}  # this dir ran this study
        swept = sorted(set(same.get("swept_keys") or []) | set(_swept(node)))
        state = {**same, "sweep_id": sweep_id, "swept_keys": swept, "shared": True}
        state.setdefault("parent_run_id", None)
        state.pop("sweep_pid", None)
        write_json_atomic(sweep_dir / SWEEP_FILE, state)
        if not node.tracking.enabled:
            return
        uri = _reachable_uri(node)
        made = shared.recorded_parent(uri, creator) or _parent_made_before(uri, node.tracking.experiment, sweep_id)
        if made is None:
            self._open_parent(node, sweep_dir, state, uri)
            shared.record_parent(uri, state["parent_run_id"])
            return
        state.update(parent_run_id=made, uri=uri, experiment=node.tracking.experiment)
        write_json_atomic(sweep_dir / SWEEP_FILE, state)

    def _open_parent(self, node: DictConfig, sweep_dir: Path, state: dict, uri: str, made: str | None = None):
        """The parent run, created with the sweep's id as a tag (so a rerun finds it if this sweep is killed before
        recording it), or `made`, the one it made then, continued."""
        experiment = node.tracking.experiment
        identity = {"sweep_id": state["sweep_id"], "sweep.role": "parent"}
        name = f"sweep-{state['sweep_id']}"
        parent = open_run(uri, Path.cwd(), experiment, name, resume_run_id=made, tags=identity)
        parent.set_tags({"sweep.overrides": " ".join(node.hydra.overrides.task), "sweep.dir": str(sweep_dir)})
        parent.flush()
        state.update(parent_run_id=parent.run_id, uri=uri, experiment=experiment)
        write_json_atomic(sweep_dir / SWEEP_FILE, state)

    def _continue(self, node: DictConfig, sweep_dir: Path, state: dict) -> None:
        """The same sweep dir again (a named sweep re-run): same sweep id and parent run; jobs that
        finished are skipped and killed ones resume (`sweep.job`)."""
        print(
            f"Continuing sweep {state['sweep_id']} in {sweep_dir}: finished jobs are skipped, "
            "interrupted ones resume from their checkpoints.",
            flush=True,
        )
        state["swept_keys"] = sorted(set(state.get("swept_keys") or []) | set(_swept(node)))
        state["runs"] = state.get("runs", 1) + 1
        (sweep_dir / STOP_FILE).unlink(missing_ok=True)  # a fail-fast stop is over: this run continues the jobs
        if state.get("parent_run_id"):
            from mlflow.tracking import MlflowClient

            check_reachable(state["uri"])
            client = MlflowClient(state["uri"])
            state["parent_status"] = with_retry(client.get_run, state["parent_run_id"]).info.status
            with_retry(client.update_run, state["parent_run_id"], status="RUNNING")
        state.pop("sweep_pid", None)
        write_json_atomic(sweep_dir / SWEEP_FILE, state)
        if node.tracking.enabled and not state.get("parent_run_id"):  # killed before it recorded its parent
            uri = _reachable_uri(node)
            made = _parent_made_before(uri, node.tracking.experiment, state["sweep_id"])
            self._open_parent(node, sweep_dir, state, uri, made)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        state = read_json(sweep_dir / SWEEP_FILE, {})
        # The sweep's promise, recorded for whoever checks it: jobs ran elsewhere, TensorFlow never loaded here.
        state.update(sweep_pid=os.getpid(), tensorflow_loaded="tensorflow" in sys.modules)
        write_json_atomic(sweep_dir / SWEEP_FILE, state)
        stop = stopped_by(sweep_dir)
        shared = SharedStudy.of(config)
        parent = state.get("parent_run_id")
        if shared is not None and parent and not shared.summarises(state["uri"], parent):
            print(
                f"Study {shared.name!r} goes on in other sweepers (or one of them ended its last trial): the sweeper "
                "that ends the last trial summarises the parent run.",
                flush=True,
            )
        elif state.get("parent_run_id"):
            if shared is not None:  # the study's report, written by its summariser alone
                sweeper = config.hydra.sweeper
                goal = sweep_goal(sweeper.get("objectives"), sweeper.get("direction"), objective(config))[0]
                write_report(shared.study(), goal, sweep_dir / "summary" / SEARCH_DIR)
            # The registry first, while the parent still runs: its decision is tagged before the summary ends it.
            champion = crown(state["uri"], state["parent_run_id"], goal_of(config))
            direction = config.hydra.sweeper.get("direction")
            summarise(
                state["uri"],
                state["parent_run_id"],
                sweep_dir,
                state.get("swept_keys") or [],
                objective(config),
                direction if isinstance(direction, str) else None,
                stopped_by=stop,
            )
            if champion:
                print(champion, flush=True)
        if self._lock is not None:
            self._lock.release()
        if stop:
            print(
                f"sweep.fail_fast=true: the sweep stopped at {stop['job']} (exit {stop['exit_code']}, see "
                f"{stop['log']}); jobs it stopped or never started continue when the same sweep runs again.",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(1)


def _reachable_uri(node: DictConfig) -> str:
    uri = resolve_uri(node.tracking.uri, Path.cwd())
    check_reachable(uri)
    initialise_store(uri)
    check_experiment_active(uri, node.tracking.experiment)
    return uri


def _parent_made_before(uri: str, experiment: str, sweep_id: str) -> str | None:
    """The parent run a sweep with this id created before it was killed, if MLflow has one."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    found = with_retry(client.get_experiment_by_name, experiment)
    if found is None:
        return None
    runs = with_retry(
        client.search_runs,
        [found.experiment_id],
        filter_string=f"tags.sweep_id = '{sweep_id}' and tags.`sweep.role` = 'parent'",
        max_results=1,
    )
    return runs[0].info.run_id if runs else None


def withdraw(sweep_dir: Path) -> None:
    """A sweep refused before its first job leaves nothing behind: a new sweep's parent run and state are removed,
    a continued sweep's parent goes back to the status it had."""
    from mlflow.tracking import MlflowClient

    state = read_json(sweep_dir / SWEEP_FILE, {})
    if state.get("shared"):  # a shared study's parent and state are every sweeper's: a refused one leaves them be
        return
    if state.get("parent_run_id"):
        client = MlflowClient(state["uri"])
        if state.get("parent_status"):
            with_retry(client.update_run, state["parent_run_id"], status=state["parent_status"])
        else:
            with_retry(client.delete_run, state["parent_run_id"])
    if not state.get("parent_status") and not state.get("runs"):
        (sweep_dir / SWEEP_FILE).unlink(missing_ok=True)
