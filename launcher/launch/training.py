"""One launch in named steps: prepare, build, restore, agree, start tracking, fit and finish.

    config -> probe -> resolve -> Plan -> runtime -> data -> build -> restore -> MLflow -> engine

Every step that can refuse the config (resolve, data, schedule, the tracking server, a
checkpoint from another model) runs before MLflow hears of the launch, and a refusal is a
`ConfigError`, never a TensorFlow traceback. Each step's work is in its own module; this one
only says their order and what each hands the next.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from launcher.config.errors import ConfigError
from launcher.config.schema import Config, Mode, to_config
from launcher.contract import EXIT_FAILED, EXIT_FINISHED, FAILED, FINISHED, Ending, ending_of
from launcher.launch.agree import agree_on_plan
from launcher.launch.building import build_model
from launcher.launch.context import LaunchContext
from launcher.launch.curves import write_curves
from launcher.launch.finish import finish
from launcher.launch.hooks.assembly import FitHooks, hooks_for
from launcher.launch.mlflow_run import open_mlflow_run
from launcher.launch.preflight import checkpoint_directory, preflight, settings_of
from launcher.launch.restore import restore
from launcher.launch.run_dirs import has_plan, what_explain_kept
from launcher.launch.stopping import numerics_guard, preemption_guard, requeue_job, stop_context
from launcher.outcome import OutcomeRecord
from launcher.plan.resume import layout_of


def execute(node, run_dir: Path, launch_dir: Path, choices: dict | None = None) -> OutcomeRecord:
    """Resolve, print and save the Plan, then train unless explain=true: the outcome record (with, in this
    process, the Plan, the fit's result and the model). Raises ConfigError."""
    config = to_config(node)
    if config.mode == Mode.doctor:  # __main__ routes mode=doctor to the doctor; execute() only trains
        raise ConfigError.single(
            "mode",
            "doctor",
            "mode=train for sweep jobs (the doctor examines one config)",
            "drop -m: python -m launcher mode=doctor <the overrides of one job>",
        )
    return TrainingLaunch(config, run_dir, launch_dir, choices or {}).execute()


class TrainingLaunch:
    """One training launch. Each step reads the `context` the earlier ones built (`LaunchContext`: the config,
    the Plan, what was prepared, built and restored, the agreement, the tracker) and the launch makes the next
    context with what the step found; `plan` gains a record at each step that decides something."""

    def __init__(self, config: Config, run_dir: Path, launch_dir: Path, choices: dict):
        checkpoints = checkpoint_directory(config, run_dir, launch_dir)
        self.context = LaunchContext(config, settings_of(config), choices, run_dir, launch_dir, checkpoints)

    def _found(self, **changes) -> None:
        self.context = replace(self.context, **changes)

    def execute(self) -> OutcomeRecord:
        run_dir = self.context.run_dir
        planned_before = has_plan(run_dir)  # an explain keeps a run's own Plan (preflight)
        self.prepare()
        if self.context.config.explain:
            print(f"\nexplain=true: nothing trained; {what_explain_kept(run_dir, planned_before)}.")
            return OutcomeRecord(
                FINISHED, EXIT_FINISHED, plan=self.context.plan, run_dir=self.context.run_dir, explained=True
            )
        self.build()
        self.restore()
        self.agree()
        self.start_tracking()
        return self.fit()

    def prepare(self) -> None:
        """Probe, resolve, set up the runtime, load the data, schedule; refuse every problem at once; print and
        save the Plan."""
        c = self.context
        prepared = preflight(c.config, c.settings, c.run_dir, c.launch_dir)
        self._found(prepared=prepared, plan=prepared.plan)

    def build(self) -> None:
        """Model, optimizer (+ loss-scale optimizer) and metrics inside the strategy scope; init_from, freeze; the
        exports asked for, tried on the untrained model (one that cannot be written is refused before training)."""
        c = self.context
        built, plan, freezer = build_model(c.config, c.plan, c.prepared, c.run_dir, c.checkpoint_dir)
        self._found(built=built, plan=plan, freezer=freezer)

    def restore(self) -> None:
        """Resume from the run's checkpoints (before tracking: another model's checkpoint is a ConfigError)."""
        restored = restore(self.context)
        self._found(restored=restored, plan=restored.plan)

    def agree(self) -> None:
        """Multi-worker: every worker resolved the same Plan, or none trains."""
        c = self.context
        self._found(agreement=agree_on_plan(c.plan, c.settings, c.built.strategy))

    def start_tracking(self) -> None:
        """Continue the checkpoint's MLflow run, or open a new one with params, tags and the Plan."""
        self._found(tracker=open_mlflow_run(self.context))
        c = self.context
        if c.checkpointer:
            c.checkpointer.record(c.tracker.run_id, layout_of(c.plan), c.run_dir)

    def fit(self) -> OutcomeRecord:
        """Train with the hooks; mark the MLflow run FINISHED, KILLED or FAILED whatever happens. Every stop says
        its own ending (`launcher.contract.Ending`): one `except` records it."""
        from launcher.train.engine import Engine, EngineSettings

        c = self.context
        config, plan, restored, tracker = c.config, c.plan, c.restored, c.tracker
        result = stop_reason = digest = curves = None
        drawn = False
        ending = Ending(FAILED, EXIT_FAILED)
        with preemption_guard(config, plan) as guard:
            hooks = hooks_for(c, guard)
            self._resume(hooks)
            try:
                settings = EngineSettings(
                    seed=config.seed,
                    shuffle_buffer=config.dataset.shuffle_buffer,
                    callbacks=c.built.callbacks,
                    guard=numerics_guard(config, plan),
                    telemetry=config.train.telemetry,
                    freezer=c.freezer,
                )
                engine = Engine(c.built, plan, c.source, settings)
                result = engine.fit(config.train.epochs, start=restored.position, hooks=hooks.hooks)
                result.earlier = restored.earlier_epochs()
                tags = hooks.stop_tags(result, plan.schedule)
                stop_reason = tags["stop_reason"]
                tracker.set_tags(tags)
                guard.finishing = True
                drawn, curves = True, write_curves(c, hooks.history.history)
                digest = finish(c, result, engine, hooks.best, curves)
                ending = Ending(FINISHED, EXIT_FINISHED, stop_reason=stop_reason)
            except BaseException as stop:
                ending = ending_of(stop, stop_context(plan))
                ending.announce()
                if ending.tags:
                    tracker.set_tags(ending.tags)
                if ending.reraise:
                    raise
            finally:
                if not drawn:  # a failed or stopped fit: what it trained
                    write_curves(c, hooks.history.history)
                tracker.end(ending.status)
        if ending.requeue:
            ending = requeue_job(ending)
        return OutcomeRecord.of_fit(
            ending,
            result,
            stop_reason,
            run_id=tracker.run_id,
            weights_sha256=digest,
            plan=plan,
            run_dir=c.run_dir,
            model=c.built.model,
        )

    def _resume(self, hooks: FitHooks) -> None:
        """A resumed run: the hooks take back their state (metrics MLflow missed are re-logged)."""
        restored = self.context.restored
        if restored.position is None:
            return
        hooks.hooks.load_state(restored.sidecar)
        healed = hooks.metrics.healed
        print(
            f"Resuming at {restored.position}" + (f"; re-logged {healed} epoch(s) of metrics" if healed else ""),
            flush=True,
        )
