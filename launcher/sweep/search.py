"""The launcher's hyper-parameter search: a Hydra sweeper on Optuna (`-m hparams_search=optuna`).

It asks the study for trials, runs each as a sweep job (a fresh `python -m launcher`, a child MLflow run, through
whichever Hydra launcher is configured: in this process, joblib's processes, submitit/Slurm), and tells the study
how each ended: its final objective(s), pruned (the trial's own process reported every validation and its pruner
stopped it), or failed. Everything is checked before the first trial, and refused at once.

The study lives in its storage (`<sweep dir>/optuna.db` by default), so the same named sweep again continues it:
finished and pruned trials stay, a trial a killed sweep left running is resumed into its job dir and child run,
and new trials are asked until the study holds `n_trials`. A storage given in `hydra.sweeper.storage` may be
shared by several sweepers running the same command (`launcher.sweep.shared`): each beats for the trials it
runs, takes no other sweeper's running trial, fails and queues again one whose sweeper stopped beating, and
waits until the study is done.
"""

from __future__ import annotations

import copy
import math
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf, open_dict

from launcher.config.bounds import declared
from launcher.config.errors import ConfigError, Violation
from launcher.config.samplers import PRUNERS, STUDY_OBJECTIVES, STUDY_PRUNER, make_sampler, prunes, spec_problems
from launcher.config.schema import flatten, to_config
from launcher.config.study_storage import SEARCH, Heartbeat, open_storage, storage_problems, study_name
from launcher.config.tasks import head_metric_names, known_epoch_metrics, metric_names, metric_problem, objective
from launcher.files import SWEEP_FILE, read_json, write_json_atomic
from launcher.outcome import EXIT_REFUSED
from launcher.sweep.callback import withdraw
from launcher.sweep.job import DONE, PRUNED, STOPPED, settle_abandoned, stopped_by
from launcher.sweep.search_report import SEARCH_DIR, write_report
from launcher.sweep.shared import (
    beat_once,
    beating,
    counted,
    fail_stale,
    is_surplus,
    quiet_heartbeat_warnings,
    retried_from,
    tell_told,
)
from launcher.sweep.space import (
    Dimension,
    KeyFacts,
    from_sweep,
    grid_space,
    in_condition_order,
    override_of,
    override_text,
    parse_space,
    space_problems,
    suggest,
)
from launcher.sweep.summary import sweep_goal

POLL = 2.0  # seconds between looks at a shared study whose last trials other sweepers run


class Search(Sweeper):
    """`hydra.sweeper` settings (conf/hydra/sweeper/search.yaml): the study, the sampler and pruner specs, the
    objectives and their directions, how many trials, how many at once, and the search space."""

    def __init__(
        self,
        study_name: str = "launcher",
        storage: str | None = None,
        sampler: Mapping | None = None,
        pruner: Mapping | None = None,
        objectives: Any = None,
        direction: Any = None,
        n_trials: int = 12,
        n_jobs: int = 1,
        timeout: float | None = None,
        params: Mapping | None = None,
        heartbeat_interval: int = 20,
        grace_period: int = 60,
        max_retry: int = 2,
    ):
        self.study_name = study_name
        self.storage = storage
        self.sampler = _plain(sampler) or {"name": "tpe"}
        self.pruner = _plain(pruner) or {"name": "none"}
        self.objectives_given = _plain(objectives)
        self.direction = _plain(direction)
        self.n_trials = n_trials
        self.n_jobs = n_jobs
        self.timeout = timeout
        self.params = _plain(params) or {}
        self.heartbeat = Heartbeat(heartbeat_interval, grace_period, max_retry)
        self.node: DictConfig | None = None
        self.launcher = None
        self.hydra_context = None
        self._bounds_found: dict[str, str] | None = None
        self._storage = None  # the study's, once the search starts

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.node = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function
        )

    # ------------------------------------------------------------------ what is searched, checked

    @property
    def objectives(self) -> list[str]:
        return sweep_goal(self.objectives_given, self.direction, objective(self.node))[0]

    @property
    def directions(self) -> list[str]:
        return sweep_goal(self.objectives_given, self.direction, objective(self.node))[1]

    def plan(self, arguments: list[str]) -> tuple[list[str], list[Dimension], list[Violation]]:
        """The fixed overrides, the space (YAML params, then sweep syntax from the command line, a fixed value on
        the command line winning over both), and every problem found in them."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        dimensions, problems = parse_space(self.params)
        fixed, from_cli = [], []
        for override in OverridesParser.create().parse_overrides(arguments):
            if override.is_sweep_override():
                from_cli.append(from_sweep(override.get_key_element(), override.value()))
            else:
                fixed.append(override.input_line)
        pinned = {line.split("=", 1)[0].lstrip("+~") for line in fixed}
        cli_keys = {d.key for d in from_cli}
        dimensions = [d for d in dimensions if d.key not in pinned and d.key not in cli_keys] + from_cli
        dimensions = in_condition_order(dimensions)
        if not dimensions:
            problems.append(
                Violation(
                    "hydra.sweeper.params",
                    {},
                    "at least one searched key",
                    "e.g. hydra.sweeper.params='{optimizer.learning_rate: {low: 1e-4, high: 0.1, log: true}}'",
                )
            )
        problems += space_problems(dimensions, self._facts, self._all_keys())
        problems += self._settings_problems(dimensions)
        return fixed, dimensions, problems

    def _settings_problems(self, dimensions: list[Dimension]) -> list[Violation]:
        problems = spec_problems("sampler", self.sampler, "hydra.sweeper.sampler")
        problems += spec_problems("pruner", self.pruner, "hydra.sweeper.pruner")
        if self.sampler.get("name") == "grid":
            problems += grid_space(dimensions)[1]
        if self.storage:
            problems += storage_problems(str(self.storage))
        beats = self.heartbeat
        for key, value, least in (
            ("n_trials", self.n_trials, 1),
            ("n_jobs", self.n_jobs, 1),
            ("heartbeat_interval", beats.interval, 1),
            ("grace_period", beats.grace_period, 2 * beats.interval if isinstance(beats.interval, int) else 2),
            ("max_retry", beats.retries, 0),
        ):
            if not isinstance(value, int) or value < least:
                problems.append(Violation(f"hydra.sweeper.{key}", value, f"an integer >= {least}", f"{key}=1"))
        if len(self.directions) != len(self.objectives) or any(
            d not in ("minimize", "maximize") for d in self.directions
        ):
            problems.append(
                Violation(
                    "hydra.sweeper.direction",
                    self.direction,
                    f"minimize or maximize, one per objective ({self.objectives}), or null (by the metric's name)",
                    "hydra.sweeper.direction=null",
                )
            )
        task, known = logged_metrics(self.node.task)
        found = (metric_problem("hydra.sweeper.objectives", name, task, known) for name in self.objectives)
        problems += [problem for problem in found if problem is not None]
        searched = {d.key for d in dimensions}
        once = self.node.train.epochs == 1 and not self.node.train.val_every_steps and "train.epochs" not in searched
        if prunes(self.pruner) and once:
            problems.append(
                Violation(
                    "hydra.sweeper.pruner.name",
                    self.pruner.get("name"),
                    "none when a trial reports once: train.epochs=1 without train.val_every_steps has nothing to "
                    "prune before the end",
                    "more epochs, train.val_every_steps=<N>, or hydra.sweeper.pruner.name=none",
                )
            )
        if prunes(self.pruner) and len(self.objectives) > 1:
            problems.append(
                Violation(
                    "hydra.sweeper.pruner.name",
                    self.pruner.get("name"),
                    f"none for a search of {len(self.objectives)} objectives (Optuna prunes by one objective only)",
                    "hydra.sweeper.pruner.name=none, or one objective",
                )
            )
        return problems

    def _facts(self, key: str) -> KeyFacts:
        choices = self.node.hydra.runtime.choices
        if key in choices:
            options = self.hydra_context.config_loader.get_group_options(key)
            return KeyFacts(True, choices[key], options=tuple(options))
        missing = object()
        value = OmegaConf.select(self.node, key, default=missing, throw_on_missing=False)
        if value is missing:
            return KeyFacts(False)
        if isinstance(value, DictConfig) or OmegaConf.is_config(value):
            value = OmegaConf.to_container(value)
        return KeyFacts(True, value, bound=self._bounds().get(key))

    def _bounds(self) -> dict[str, str]:
        """The declared range of every bounded key (`launcher.config.bounds`), from the composed config."""
        if self._bounds_found is None:
            job = copy.deepcopy(self.node)
            with open_dict(job):
                job.pop("hydra")
            try:
                self._bounds_found = {key: meta["bound"] for key, _, meta in declared(to_config(job))}
            except ConfigError:  # a config that does not resolve: each job refuses it, with its reason
                self._bounds_found = {}
        return self._bounds_found

    def _all_keys(self) -> list[str]:
        """Every config group and key, for the closest-match hint of an unknown key."""
        plain = OmegaConf.to_container(
            OmegaConf.masked_copy(self.node, [k for k in self.node if k != "hydra"]), resolve=False
        )
        return [*self.node.hydra.runtime.choices, *flatten(plain)]

    def _config_value(self, key: str) -> str | None:
        fact = self._facts(key)
        return override_text(fact.value) if fact.exists else None

    # ------------------------------------------------------------------ the search

    def sweep(self, arguments: list[str]) -> None:
        import optuna
        from optuna.trial import TrialState

        fixed, dimensions, problems = self.plan(arguments)
        if problems:
            print(ConfigError(problems), file=sys.stderr, flush=True)
            print("Nothing ran: fix the search and run the same command again.", file=sys.stderr, flush=True)
            withdraw(Path(self.node.hydra.sweep.dir))
            raise SystemExit(EXIT_REFUSED)
        sweep_dir = Path(self.node.hydra.sweep.dir)
        shared = bool(self.storage)  # given: other sweepers may pull trials from the same study
        self.study_name = study_name(self.study_name, str(self.node.get("name") or ""), shared)
        storage_url = str(self.storage or f"sqlite:///{sweep_dir / 'optuna.db'}")
        grid, _ = grid_space(dimensions) if self.sampler.get("name") == "grid" else ({}, [])
        if grid:
            dimensions = [d.as_grid() for d in dimensions]
        quiet_heartbeat_warnings()
        try:
            storage = self._storage = open_storage(storage_url, self.heartbeat if shared else None)
        except ConfigError as refused:
            print(f"\n{refused}\n", file=sys.stderr, flush=True)
            raise SystemExit(EXIT_REFUSED) from None
        earlier = self._trials_so_far(storage)
        seed, seed_note = self._seed(shared, earlier)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            study_name=self.study_name,
            storage=storage,
            sampler=make_sampler(self.sampler, seed, grid),
            directions=self.directions,
            load_if_exists=True,
        )
        if shared:
            self._same_search(study, dimensions)
        study.set_user_attr(STUDY_PRUNER, self.pruner)
        study.set_user_attr(STUDY_OBJECTIVES, self.objectives)
        self._remember_study(sweep_dir, storage_url)
        total = min(self.n_trials, math.prod(len(v) for v in grid.values())) if grid else self.n_trials
        self._announce(dimensions, earlier, total, seed_note, "joined" if shared else "continuing")

        # A private study's running trials were left by a killed run of this sweep (no other sweeper uses it).
        resumed = (
            []
            if shared
            else [
                (t.number, t.number, [override_of(k, v) for k, v in t.params.items()])
                for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            ]
        )
        self._run_trials(study, fixed, dimensions, total, resumed, shared)
        if not shared:  # a shared study's report is its summariser's (sweepers may share this sweep dir)
            write_report(study, self.objectives, sweep_dir / "summary" / SEARCH_DIR)

    def _run_trials(self, study, fixed: list[str], dimensions, total: int, resumed: list, shared: bool) -> None:
        """Batches of trials until the study holds `total` (resumed ones first), the timeout, or a fail-fast stop.
        On a shared study: first fail the trials of dead sweepers (queued again), and wait while others run."""
        from optuna.trial import TrialState

        sweep_dir, storage = Path(self.node.hydra.sweep.dir), self._storage
        started = time.monotonic()
        while not stopped_by(sweep_dir):
            if self.timeout and time.monotonic() - started > float(self.timeout):
                print(f"hydra.sweeper.timeout={self.timeout} s reached: no new trials.", flush=True)
                return
            if shared and (abandoned := fail_stale(study)):
                settle_abandoned(sweep_dir, abandoned)
            batch = resumed[: self.n_jobs]
            resumed = resumed[len(batch) :]
            while len(batch) < self.n_jobs and self._left(study, total):
                trial = study.ask()
                if shared:  # beating from its first moment: a trial never beaten for is never found stale
                    beat_once(storage, study, trial.number)
                if is_surplus(study, trial, total):  # another sweeper asked the last trial at the same moment
                    break
                chosen = suggest(trial, dimensions, self._config_value)
                job = retried_from(trial)  # a trial queued again runs in its first run's job dir
                values = [override_of(k, v) for k, v in chosen.items()]
                batch.append((trial.number, trial.number if job is None else job, values))
            if not batch:
                if shared and study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                    # Other sweepers' trials: one whose sweeper dies is queued again, for whoever looks next.
                    time.sleep(min(self.heartbeat.interval, POLL))
                    continue
                return
            with beating(storage if shared else None, study, [number for number, _, _ in batch]):
                for number, job in self._launch(fixed, batch):
                    self._tell(study, number, job)

    def _same_search(self, study, dimensions: list[Dimension]) -> None:
        """A sweeper joining a shared study searches what its creator searches (the keys, the objectives and their
        directions); another search is refused (exit 2) before it tells the study anything."""
        searched = {"keys": sorted(d.key for d in dimensions), "objectives": self.objectives}
        recorded = study.user_attrs.get(SEARCH)
        if recorded is None:
            study.set_user_attr(SEARCH, searched)
            return
        if recorded == searched and [d.name.lower() for d in study.directions] == self.directions:
            return
        print(
            ConfigError.single(
                "hydra.sweeper.study_name",
                self.study_name,
                f"a study that searches what this sweeper searches: it searches {recorded['keys']} for "
                f"{recorded['objectives']}, this one {searched['keys']} for {searched['objectives']} "
                f"({', '.join(self.directions)})",
                "another study for this search: name=<another name> or hydra.sweeper.study_name=<another name>",
            ),
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(EXIT_REFUSED)

    @staticmethod
    def _left(study, total: int) -> bool:
        """Whether a trial is there to take: one queued again, or fewer than `total` counted."""
        from optuna.trial import TrialState

        return bool(study.get_trials(deepcopy=False, states=(TrialState.WAITING,))) or len(counted(study)) < total

    def _seed(self, shared: bool, earlier: int) -> tuple[int | None, str | None]:
        """The sampler's seed, and what the announcement says of it. A seeded sampler started again would propose
        its first points again: offset by the trials the study has. Sweepers sharing a study each draw their own
        seed unless one is given (then they propose the same points)."""
        given = self.sampler.get("seed")
        if not shared:
            return (0 if given is None else int(given)) + earlier, None
        if given is None:
            seed = int.from_bytes(os.urandom(4), "little") >> 1
            return seed, f"sampler seed {seed}, this sweeper's own (hydra.sweeper.sampler.seed=N fixes one for all)"
        return int(given) + earlier, (
            f"sampler seed fixed at {given}: sweepers started together propose the same points "
            "(hydra.sweeper.sampler.seed=null gives each its own)"
        )

    def _launch(self, fixed: list[str], batch: list[tuple[int, int, list[str]]]):
        """Run a batch of trials at once; each job's number (its dir under the sweep dir) is its trial's number
        (a trial queued again: its first run's), so a trial resumed by a later run of the sweep is the same job.
        Numbers that do not follow each other (trials resumed beside new ones) are launched one by one."""
        numbers = [job for _, job, _ in batch]
        groups = [batch] if numbers == list(range(numbers[0], numbers[0] + len(numbers))) else [[b] for b in batch]
        for group in groups:
            jobs = [tuple([*fixed, *values, f"sweep.trial={number}"]) for number, _, values in group]
            returns = self.launcher.launch(jobs, initial_job_idx=group[0][1])
            yield from zip([number for number, _, _ in group], returns, strict=True)

    def _trials_so_far(self, storage) -> int:
        try:
            study_id = storage.get_study_id_from_name(self.study_name)
        except KeyError:
            return 0
        return len(storage.get_all_trials(study_id, deepcopy=False))

    def _remember_study(self, sweep_dir: Path, storage_url: str) -> None:
        """Where the sweep's jobs report: sweep.json (`sweep.job` passes it to each trial's process)."""
        state = read_json(sweep_dir / SWEEP_FILE, {})
        state["study"] = {"storage": storage_url, "name": self.study_name}
        write_json_atomic(sweep_dir / SWEEP_FILE, state)

    def _announce(self, dimensions: list[Dimension], earlier: int, total: int, seed_note: str | None, how: str) -> None:
        goal = ", ".join(f"{d} {o}" for o, d in zip(self.objectives, self.directions, strict=True))
        print(
            f"Search: study {self.study_name!r}, {goal}; sampler {self.sampler.get('name', 'tpe')}, pruner "
            f"{self.pruner.get('name', 'none')} ({PRUNERS[str(self.pruner.get('name', 'none'))].does}); "
            f"{total} trials"
            + (f" (the grid's size; n_trials={self.n_trials})" if total < self.n_trials else "")
            + f", {self.n_jobs} at a time"
            + (f"; {how}: {earlier} trial(s) in the study already" if earlier else "")
            + (f"; {seed_note}" if seed_note else ""),
            flush=True,
        )
        for dim in dimensions:
            print(f"  {dim.key}: {dim.describe()}", flush=True)

    def _tell(self, study, number: int, job) -> None:
        from hydra.core.utils import JobStatus
        from optuna.trial import TrialState

        if job.status != JobStatus.COMPLETED:
            tell_told(self._storage, study, number, state=TrialState.FAIL)
            return
        result = job.return_value
        if result.status == STOPPED:  # left RUNNING: the same sweep again resumes it
            return
        if result.status == PRUNED:
            tell_told(self._storage, study, number, state=TrialState.PRUNED)
            return
        values = [result.value(name) for name in self.objectives]
        if result.status != DONE or any(math.isnan(v) for v in values):  # failed, or never logged the objective
            tell_told(self._storage, study, number, state=TrialState.FAIL)
            return
        tell_told(self._storage, study, number, values=values)


def logged_metrics(task_config) -> tuple[str, list[str] | None]:
    """The task's name and every epoch metric its runs log (None: a user metric's name is known only at build); under
    task.heads each head's, as Keras names them (<head>_loss, <head>_<metric>, their val_ forms) and the total loss."""
    if not getattr(task_config, "heads", None):
        task = task_config.name.value
        return task, known_epoch_metrics(task, metric_names(task, task_config.metrics))
    logged = []
    for head, head_config in task_config.heads.items():
        logged += head_metric_names(head, head_config.name.value, head_config.metrics)
    return "heads", known_epoch_metrics("heads", logged)


def _plain(value: Any) -> Any:
    """YAML settings as plain lists and dicts (Hydra hands them over as OmegaConf nodes)."""
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
