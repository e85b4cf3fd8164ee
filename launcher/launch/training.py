"""One launch in named steps: prepare, build, restore, agree, start tracking, fit and finish.

    config -> probe -> resolve -> Plan -> runtime -> data -> build -> restore -> MLflow -> engine

Every step that can refuse the config (resolve, data, schedule, the tracking server, a
checkpoint from another model) runs before MLflow hears of the launch, and a refusal is a
`ConfigError`, never a TensorFlow traceback. Each step's work is in its own module; this one
only says their order and what each hands the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.config.errors import ConfigError
from launcher.config.schema import Config, Mode, to_config
from launcher.contract import EXIT_FAILED, EXIT_FINISHED, FAILED, FINISHED, Ending, FitResult, ending_of
from launcher.files import PLAN_FILE
from launcher.launch.agree import agree_on_plan
from launcher.launch.building import build_model
from launcher.launch.finish import finish
from launcher.launch.hooks.assembly import FitHooks, hooks_for
from launcher.launch.mlflow_run import open_mlflow_run
from launcher.launch.preflight import checkpoint_directory, preflight, settings_of
from launcher.launch.restore import Restored, restore
from launcher.launch.stopping import numerics_guard, preemption_guard, requeue_job, stop_context
from launcher.plan.decisions import Plan
from launcher.plan.resume import layout_of
from launcher.tracking.tracker import NullTracker, RunTracker


@dataclass
class Outcome:
    """What one launch produced, in this process (tests read it; `launch.train_mode.train` turns it into the typed
    outcome record and the exit code)."""

    plan: Plan
    result: FitResult | None = None  # None for explain=true
    run_id: str | None = None
    run_dir: Path | None = None
    error: str | None = None
    failure: str | None = None  # launcher.outcome's TRAINING_FAILURE, NUMERICS_STOP or CHECKPOINT_WRITE
    stop_reason: str | None = None  # a finished launch: epochs, max_steps, early_stopping, pruned or max_time
    exit_code: int | None = None  # None: nothing trained (explain=true), exit 0
    model: Any = None
    weights_sha256: str | None = None  # multi-worker: of the final weights, the same on every worker
    status: str | None = None  # the MLflow run's end: FINISHED, FAILED or KILLED (None: nothing trained)

    def ended(self, ending: Ending) -> None:
        self.status, self.exit_code = ending.status, ending.exit_code
        self.error, self.failure = ending.error, ending.failure
        self.stop_reason = ending.stop_reason or self.stop_reason  # a failed export keeps why training ended


def execute(cfg_node, run_dir: Path, launch_dir: Path, choices: dict | None = None) -> Outcome:
    """Resolve, print and save the Plan, then train unless explain=true. Raises ConfigError."""
    config = to_config(cfg_node)
    if config.mode == Mode.doctor:  # __main__ routes mode=doctor to the doctor; execute() only trains
        raise ConfigError.single(
            "mode",
            "doctor",
            "mode=train for sweep jobs (the doctor examines one config)",
            "drop -m: python -m launcher mode=doctor <the overrides of one job>",
        )
    return TrainingLaunch(config, run_dir, launch_dir, choices or {}).execute()


class TrainingLaunch:
    """One training launch. Each step reads what the earlier ones returned: `prepared` (the machine, data,
    strategy, trial), `built`, `restored` (checkpointer and resume position), `agreement` (multi-worker) and
    `tracker`; `plan` gains a record at each step that decides something."""

    def __init__(self, config: Config, run_dir: Path, launch_dir: Path, choices: dict):
        self.config, self.run_dir, self.launch_dir, self.choices = config, run_dir, launch_dir, choices
        self.settings = settings_of(config)  # what config.yaml and the MLflow params say
        self.checkpoint_dir = checkpoint_directory(config, run_dir, launch_dir)
        self.plan: Plan | None = None
        self.prepared = self.source = self.built = self.freezer = self.agreement = None
        self.restored: Restored | None = None
        self.tracker: RunTracker = NullTracker()

    def execute(self) -> Outcome:
        self.prepare()
        if self.config.explain:
            print(f"\nexplain=true: nothing trained. Plan written to {self.run_dir / PLAN_FILE}")
            return Outcome(plan=self.plan, run_dir=self.run_dir)
        self.build()
        self.restore()
        self.agree()
        self.start_tracking()
        return self.fit()

    def prepare(self) -> None:
        """Probe, resolve, set up the runtime, load the data, schedule; refuse every problem at once; print and
        save the Plan."""
        self.prepared = preflight(self.config, self.settings, self.run_dir, self.launch_dir)
        self.plan, self.source = self.prepared.plan, self.prepared.source

    def build(self) -> None:
        """Model, optimizer (+ loss-scale optimizer) and metrics inside the strategy scope; init_from, freeze; the
        exports asked for, tried on the untrained model (one that cannot be written is refused before training)."""
        self.built, self.plan, self.freezer = build_model(self.config, self.plan, self.prepared, self.run_dir)

    def restore(self) -> None:
        """Resume from the run's checkpoints (before tracking: another model's checkpoint is a ConfigError)."""
        remote = self.prepared.remote
        self.restored = restore(
            self.config, self.settings, self.plan, self.built, self.checkpoint_dir, remote, self.run_dir
        )
        self.plan = self.restored.plan

    def agree(self) -> None:
        """Multi-worker: every worker resolved the same Plan, or none trains."""
        self.agreement = agree_on_plan(self.plan, self.settings, self.built.strategy)

    def start_tracking(self) -> None:
        """Continue the checkpoint's MLflow run, or open a new one with params, tags and the Plan."""
        prepared, checkpointer = self.prepared, self.restored.checkpointer
        self.tracker = open_mlflow_run(
            self.config,
            self.settings,
            self.choices,
            self.plan,
            env=prepared.env,
            source=self.source,
            run_dir=self.run_dir,
            launch_dir=self.launch_dir,
            tracking_uri=prepared.tracking_uri,
            resume_run_id=self.restored.sidecar.get("mlflow_run_id"),
            init_source=prepared.init_source,
        )
        if checkpointer:
            checkpointer.record(self.tracker.run_id, layout_of(self.plan), self.run_dir)

    def fit(self) -> Outcome:
        """Train with the hooks; mark the MLflow run FINISHED, KILLED or FAILED whatever happens. Every stop says
        its own ending (`launcher.contract.Ending`): one `except` records it."""
        from launcher.train.engine import Engine

        config, plan, restored = self.config, self.plan, self.restored
        outcome = Outcome(plan=plan, run_id=self.tracker.run_id, run_dir=self.run_dir, model=self.built.model)
        ending = Ending(FAILED, EXIT_FAILED)
        with preemption_guard(config, plan) as guard:
            hooks = hooks_for(
                config,
                plan,
                self.built,
                self.tracker,
                self.prepared.env,
                self.run_dir,
                guard,
                restored.checkpointer,
                self.agreement,
                self.prepared.trial,
            )
            self._resume(hooks)
            try:
                engine = Engine(
                    self.built,
                    plan,
                    self.source,
                    seed=config.seed,
                    shuffle_buffer=config.dataset.shuffle_buffer,
                    callbacks=self.built.callbacks,
                    guard=numerics_guard(config, plan),
                    telemetry=config.train.telemetry,
                    freezer=self.freezer,
                )
                outcome.result = engine.fit(config.train.epochs, start=restored.position, hooks=hooks.hooks)
                outcome.result.earlier = restored.earlier_epochs()
                tags = hooks.stop_tags(outcome.result, plan.schedule)
                outcome.stop_reason = tags["stop_reason"]
                self.tracker.set_tags(tags)
                guard.finishing = True
                outcome.weights_sha256 = self.finish(outcome.result, engine, hooks)
                ending = Ending(FINISHED, EXIT_FINISHED, stop_reason=outcome.stop_reason)
            except BaseException as stop:
                ending = ending_of(stop, stop_context(plan))
                ending.announce()
                if ending.tags:
                    self.tracker.set_tags(ending.tags)
                if ending.reraise:
                    raise
            finally:
                self.tracker.end(ending.status)
        outcome.ended(ending)
        if ending.requeue:
            requeue_job(outcome)
        return outcome

    def finish(self, result: FitResult, engine, hooks: FitHooks) -> str | None:
        """Export, compare the workers' final weights, test (train.test_at_end), print the summary."""
        return finish(
            self.config,
            self.plan,
            self.built,
            self.source,
            self.tracker,
            self.run_dir,
            result,
            engine,
            best=hooks.best,
            checkpointer=self.restored.checkpointer,
            remote=self.prepared.remote,
            agreement=self.agreement,
        )

    def _resume(self, hooks: FitHooks) -> None:
        """A resumed run: the hooks take back their state (metrics MLflow missed are re-logged)."""
        if self.restored.position is None:
            return
        hooks.hooks.load_state(self.restored.sidecar)
        healed = hooks.metrics.healed
        print(
            f"Resuming at {self.restored.position}" + (f"; re-logged {healed} epoch(s) of metrics" if healed else ""),
            flush=True,
        )
