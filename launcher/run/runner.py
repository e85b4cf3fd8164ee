"""One launch in named steps: prepare, build, restore, start tracking, fit (and finish).

    config -> probe -> resolve -> Plan -> runtime -> data -> build -> restore -> MLflow -> engine

Every step that can refuse the config (resolve, data, schedule, the tracking server, a
checkpoint from another model) runs before MLflow hears of the launch, and a refusal is a
`ConfigError`, never a TensorFlow traceback.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from launcher.config.durations import show_duration
from launcher.config.errors import ConfigError, raise_if_any
from launcher.config.models import architecture
from launcher.config.schema import Config, as_dict
from launcher.config.tasks import known_epoch_metrics, monitor_problems
from launcher.contract import FitResult, HookList, Position, Preempted, headline
from launcher.files import CONFIG_FILE, PLAN_FILE, TUNING_FILE
from launcher.outcome import CHECKPOINT_WRITE, NUMERICS_STOP, TRAINING_FAILURE
from launcher.plan.decisions import FaultPlan, InitPlan, Plan, ResumePlan, render_record
from launcher.plan.environment import probe
from launcher.plan.resume import decide_resume, layout_of
from launcher.run.checkpoint import Checkpointer, CheckpointWriteError, check_writable, set_aside
from launcher.run.checkpoint_policy import SavePolicy
from launcher.run.export import export_model
from launcher.run.faults import OPT_IN, FaultHook, armed, fault_point, ignored
from launcher.run.hooks.best_model import BestModelHook
from launcher.run.hooks.budget import TimeBudgetHook
from launcher.run.hooks.callback_state import CallbackStateHook
from launcher.run.hooks.checkpoint import CheckpointHook
from launcher.run.hooks.history import HistoryHook
from launcher.run.hooks.metrics import MetricsHook
from launcher.run.hooks.preemption import PreemptionGuard, PreemptionHook, StopAgreementHook
from launcher.run.hooks.profiling import ProfilerHook
from launcher.run.hooks.pruning import PruningHook
from launcher.run.hooks.step_metrics import StepMetricsHook
from launcher.run.hooks.utilization import UtilizationHook
from launcher.run.mlflow_record import MODEL_ARTIFACT, dataset_inputs, save_mlflow_model
from launcher.run.params import run_name, run_params, run_tags
from launcher.run.profiling import StepProfiler
from launcher.run.remote import RemoteCheckpoints, is_remote
from launcher.run.restarts import REASON_ENV, attempt_number
from launcher.run.review import collecting, review
from launcher.run.serving import ServingExports, export_serving
from launcher.run.slurm import REQUEUE_SIGNAL, requeue
from launcher.run.trial import open_trial
from launcher.run.tuning import command_line, copy_table
from launcher.run.tuning import decide as decide_step_by_timing
from launcher.run.utilization import matmul_peak, process_age_seconds, training_flops_per_example
from launcher.tracking.tensorboard import TensorBoardMirror
from launcher.tracking.tracker import NullTracker, RunTracker, open_run
from launcher.tracking.uri import check_reachable, redact
from launcher.train import runtime
from launcher.train.agreement import Agreement, comparable, differences, disagreement, weights_digest
from launcher.train.fine_tune import Freezer, freeze_record, frozen_layers, load_matching
from launcher.train.numerics import NumericsGuard, NumericsStop

if TYPE_CHECKING:
    from launcher.train.build import Built


@dataclass
class Outcome:
    """What one launch produced, in this process (tests read it; `run.launch.train` turns it into the typed
    outcome record and the exit code)."""

    plan: Plan
    result: FitResult | None = None  # None for explain=true
    run_id: str | None = None
    run_dir: Path | None = None
    error: str | None = None
    failure: str | None = None  # launcher.outcome's TRAINING_FAILURE, NUMERICS_STOP or CHECKPOINT_WRITE
    stop_reason: str | None = None  # a finished launch: epochs, max_steps, early_stopping or max_time
    exit_code: int | None = None
    model: Any = None
    weights_sha256: str | None = None  # multi-worker: of the final weights, the same on every worker


def execute(cfg_node, run_dir: Path, launch_dir: Path, choices: dict | None = None) -> Outcome:
    """Resolve, print and save the Plan, then train unless explain=true. Raises ConfigError."""
    from launcher.config.schema import Mode, to_config

    config = to_config(cfg_node)
    if config.mode == Mode.doctor:  # __main__ routes mode=doctor to the doctor; execute() only trains
        raise ConfigError.single(
            "mode",
            "doctor",
            "mode=train for sweep jobs (the doctor examines one config)",
            "drop -m: python -m launcher mode=doctor <the overrides of one job>",
        )
    return Launch(config, run_dir, launch_dir, choices or {}).execute()


class Launch:
    """One training launch in named steps: prepare (probe, resolve, data, schedule), build, restore, agree
    (multi-worker), start tracking, fit and finish. Each step reads what the earlier ones set; every
    attribute is declared here, None until its step runs."""

    def __init__(self, config: Config, run_dir: Path, launch_dir: Path, choices: dict):
        self.config = config
        self.run_dir = run_dir
        self.launch_dir = launch_dir
        self.choices = choices
        self.settings = as_dict(config)
        # What is written and logged (config.yaml, MLflow params): never the tracking URI's credentials.
        self.settings["tracking"]["uri"] = redact(self.settings["tracking"]["uri"])
        self.settings["checkpoint"]["directory"] = redact(str(self.settings["checkpoint"]["directory"]))
        self.remote = None  # prepare(): checkpoint.directory's object store, when it names one
        self.position: Position | None = None  # where a resumed run continues; None: from the start
        self.sidecar: dict = {}
        self.checkpointer = None
        self.metrics_hook = None  # set by _hooks(); read after a resume (metrics re-logged)
        self.best_hook = None  # set by _hooks() when checkpoint.monitor is set; read at export
        self.agreement = None  # multi-worker: collectives over the workers (Plan, stop signals, final weights)
        self.weights_sha256: str | None = None
        self.env = None  # prepare(): the machine, probed (launcher.plan.environment.Environment)
        self.plan: Plan | None = None  # prepare(), then records added by build() and restore()
        self.source = None  # prepare(): the loaded data (launcher.train.data.DataSource)
        self.strategy = None  # prepare(): the tf.distribute strategy, made before any other TF op
        self.tracking_uri = config.tracking.uri  # prepare(): the fallback store when the server is away
        self.built: Built | None = None  # build(): model, optimizer, task, callbacks
        self.init_source = None  # prepare(): model.init_from, found (launcher.run.init_source.InitSource)
        self.freezer = None  # build(): model.freeze's layers and when they unfreeze
        self.trial = None  # prepare(): the hparams_search trial this run is (launcher.run.trial.Trial), if any
        self.pruning_hook = None  # set by _hooks() for a trial; read for the stop reason
        self.tracker: RunTracker = NullTracker()  # start_tracking(): the MLflow run (or nowhere)

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

    @property
    def checkpoint_dir(self) -> Path:
        """checkpoint.directory (relative to the launch dir), else <run dir>/checkpoints."""
        configured = str(self.config.checkpoint.directory).strip()
        if not configured or is_remote(configured):  # an object store's local staging copy is in the run dir
            return self.run_dir / "checkpoints"
        path = Path(configured).expanduser()
        return path if path.is_absolute() else self.launch_dir / path

    # ------------------------------------------------------------------ steps

    def prepare(self) -> None:
        """Probe, resolve, set up the runtime, load the data, schedule; print and save the Plan.

        The resolver's, the data's, the schedule's and the tracking server's problems are
        collected and refused together, in one ConfigError.
        """
        from launcher.plan.resolve import wants_measurements

        config = self.config
        self.env = probe(measure=wants_measurements(config))
        self.env, tune_record = decide_step_by_timing(config, self.env, command_line(), self.launch_dir)

        def start_runtime(plan):
            return runtime.configure(plan, config.seed, config.deterministic)

        checked = review(config, self.env, start_runtime)
        self.plan, self.source, self.strategy, problems = (
            checked.plan,
            checked.source,
            checked.strategy,
            checked.problems,
        )
        self.init_source = checked.init_source
        if tune_record is not None:
            self.plan = self.plan.with_record(tune_record)
        self._arm_fault(problems)
        self._open_trial(problems)
        if config.checkpoint.enabled and not config.explain:
            collecting(problems, check_writable, self.checkpoint_dir)
            if is_remote(config.checkpoint.directory):
                self.remote = collecting(problems, RemoteCheckpoints, str(config.checkpoint.directory).strip())
                if self.remote is not None:
                    collecting(problems, self.remote.check_writable)
        self.tracking_uri = config.tracking.uri
        if config.tracking.enabled and not config.explain:
            self._check_tracking_server(problems)
        raise_if_any(problems)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._write_plan()
        (self.run_dir / CONFIG_FILE).write_text(OmegaConf.to_yaml(self.settings))
        if tune_record is not None:
            copy_table(config, self.env, self.run_dir / TUNING_FILE)
        print(self.plan.render(), flush=True)

    def _arm_fault(self, problems: list) -> None:
        """A test's injected fault: checked now (a malformed one is refused with the rest) and put in the Plan,
        so plan.yaml and the MLflow tags say the run was sabotaged on purpose."""
        fault = collecting(problems, armed)
        if fault is not None:
            why = f"test-only fault injection (LAUNCHER_FAULT with {OPT_IN})"
            self.plan = self.plan.with_record(FaultPlan.of(armed=(fault.describe(), why)))
        elif warning := ignored():
            self.plan = self.plan.with_warning(warning)

    def _open_trial(self, problems: list) -> None:
        """An hparams_search job: its study trial, which it reports to (and is pruned by); a Plan record."""
        if self.config.explain or self.plan is None:
            return
        multi_worker = self.plan.cluster is not None
        opened = collecting(problems, open_trial, self.config.sweep, self.config.train.val_every_steps, multi_worker)
        if opened is not None:
            self.trial, record = opened
            self.plan = self.plan.with_record(record)

    def _check_tracking_server(self, problems: list) -> None:
        """An unreachable server refuses the launch, or (tracking.on_unreachable=local) is swapped for the
        local store with a warning in the Plan."""
        from launcher.config.schema import Unreachable

        tr = self.config.tracking
        unreachable = []
        collecting(unreachable, check_reachable, tr.uri)
        if not unreachable:
            return
        if tr.on_unreachable != Unreachable.local:
            problems.extend(unreachable)
            return
        self.tracking_uri = tr.fallback_uri
        self.plan = self.plan.with_warning(
            f"tracking server {redact(tr.uri)} unreachable at start "
            f"({unreachable[0].expected}); tracking.on_unreachable=local: logging to "
            f"{tr.fallback_uri}"
        )

    def build(self) -> None:
        """Model, optimizer (+ loss-scale optimizer) and metrics, inside the strategy scope."""
        from launcher.train.build import build

        self.built = build(self.config, self.plan, self.source, self.strategy)
        if self.built.output is not None:  # what only the built model shows (its output dtype): printed and saved
            self.plan = self.plan.with_record(self.built.output)
            print(render_record(self.built.output), flush=True)
            self._write_plan()
        self._fine_tune()
        task = self.plan.task.name
        if known_epoch_metrics(task, self.plan.task.metrics) is None:  # a user metric: its name is known now
            names = [m.name for m in self.built.task.train_metrics]
            raise_if_any(monitor_problems(self.config, task, known_epoch_metrics(task, names)))

    def _fine_tune(self) -> None:
        """model.init_from's weights into the built model (in the scope), model.freeze's layers found; each a Plan
        record. A source that does not fit, or a freeze that matches nothing, is refused before anything runs."""
        records = []
        model_cfg = self.config.model
        if self.init_source is not None:
            with self.strategy.scope():
                source_model = self._init_model(self.init_source)
                records.append(
                    load_matching(self.built.model, source_model, self.init_source.shown, model_cfg.init_skip_mismatch)
                )
        patterns = list(model_cfg.freeze or [])
        if patterns:
            layers = frozen_layers(self.built.model, patterns)
            records.append(freeze_record(self.built.model, layers))
            self.freezer = Freezer(layers, self.config.train.unfreeze_at_epoch)
        for record in records:
            self.plan = self.plan.with_record(record)
            print(render_record(record), flush=True)
        if records:
            self._write_plan()

    def _init_model(self, source):
        """The source's network: a .keras file loaded as saved, or a checkpoint restored into a twin of this
        config's model (a checkpoint has no layer names: it must be of this architecture)."""
        import keras
        import tensorflow as tf

        if source.kind == "keras":
            return keras.saving.load_model(source.path, compile=False)
        twin = self.built.rebuild().model
        try:
            tf.train.Checkpoint(model=twin).restore(str(source.path)).expect_partial()
        except (ValueError, tf.errors.OpError) as err:
            raise ConfigError.single(
                "model.init_from",
                str(source.path),
                f"a checkpoint of this model's architecture ({str(err).splitlines()[0][:200]})",
                "init_from the run itself (its model.keras is matched layer by layer, a new head skipped)",
            ) from None
        return twin

    def restore(self) -> None:
        """Resume from the run dir's checkpoints, deciding (in the Plan) where training continues.

        Before tracking starts: a checkpoint of another model is a ConfigError MLflow never sees.
        """

        cfg = self.config.checkpoint
        if not cfg.enabled:
            return
        directory = self.checkpoint_dir
        worker = self.plan.worker_index
        if str(cfg.resume) == "never" and self.plan.is_chief:
            set_aside(directory)
            if self.remote is not None and (aside := self.remote.set_aside()):
                print(f"WARNING: checkpoint.resume=never: remote checkpoints moved to {redact(aside)}", flush=True)
        elif self.remote is not None and (pulled := self.remote.pull(directory)):
            print(f"  remote   downloaded ckpt-{pulled[-1]} (and {len(pulled) - 1} older) from {self.remote.url}")
        model = architecture(self.settings["model"])
        self.checkpointer = Checkpointer(cfg, directory, self.built, model, worker, self.remote)
        restored = self.checkpointer.restore()
        if not restored:
            return
        saved_position, self.sidecar = restored
        if self.plan.has(InitPlan):
            self.plan = self.plan.with_warning(
                "model.init_from: the run resumed from its own checkpoint, which replaced the source's weights"
            )
        decision = decide_resume(saved_position, self.checkpointer.previous_state().get("layout"), layout_of(self.plan))
        self.position = decision.position
        record = ResumePlan.of(position=(decision.value, decision.reason))
        self.plan = self.plan.with_record(record)
        if decision.warning:
            self.plan = self.plan.with_warning(decision.warning)
        print(render_record(record), flush=True)
        self._write_plan()

    def agree(self) -> None:
        """Multi-worker: every worker must have resolved the same Plan from the same config (and resume from
        the same step); any difference stops every worker, naming the keys, before anything is tracked."""
        if self.plan.cluster is None:
            return

        self.agreement = Agreement(self.built.strategy, len(self.plan.cluster.workers))
        mine = comparable(self.plan.values(), self.settings)
        payloads = [json.loads(text) for text in self.agreement.gather_text(json.dumps(mine, default=str))]
        differing = differences(payloads)
        if differing:
            raise ConfigError([disagreement(key, values) for key, values in list(differing.items())[:20]])
        print(f"  workers  {len(payloads)} worker(s) resolved the same Plan", flush=True)

    def start_tracking(self) -> None:
        """Continue the checkpoint's MLflow run, or open a new one with params, tags and the Plan."""

        tr, plan = self.config.tracking, self.plan
        if not tr.enabled or not plan.is_chief:
            self.tracker = NullTracker()
        else:
            name = run_name(self.config, self.choices)
            params = run_params(self.settings, plan)
            self.tracker = open_run(
                self.tracking_uri,
                self.launch_dir,
                tr.experiment,
                name,
                resume_run_id=self.sidecar.get("mlflow_run_id"),
                parent_run_id=tr.parent_run_id or None,
                run_dir=self.run_dir,
                outage_wait=tr.outage_wait,
                remember=True,
                params=params,
            )
            if self.tracker.decision is not None:
                print(f"  mlflow   {self.tracker.decision.reason}", flush=True)
            fault_point("run_created", 0)
            self.tracker.deliver_spool()  # what an outage kept from an earlier launch in this run dir
            if self.tracking_uri != tr.uri:
                self.tracker.set_tags({"tracking.intended_uri": redact(tr.uri)})
            if self.init_source is not None and self.init_source.run_id and not self.tracker.resumed:
                self.tracker.set_tags({"init.source_run_id": self.init_source.run_id})
            if self.tracker.resumed:
                self.tracker.set_tags({"plan.resume": plan.record(ResumePlan).position})
            else:
                self.tracker.log_params(params)
                self.tracker.set_tags(run_tags(plan, self.env, self.run_dir, tr, name))
                self.tracker.log_artifact(self.run_dir / PLAN_FILE)
                self.tracker.log_artifact(self.run_dir / CONFIG_FILE)
                if (self.run_dir / TUNING_FILE).exists():
                    self.tracker.log_artifact(self.run_dir / TUNING_FILE)
            if not self.tracker.resumed:
                self.tracker.log_inputs(dataset_inputs(self.source, self.config.dataset))
            if restart := attempt_number():  # train.max_restarts: the supervisor says why this process exists
                why = os.environ.get(REASON_ENV, "")
                self.tracker.set_tags({"restart.count": restart, f"restart.{restart}.error": why, "error": why})
            self.tracker.flush()  # a write MLflow refuses stops the launch here, before training
            if tr.system_metrics:
                self.tracker.start_system_metrics(tr.system_metrics_interval)
            if tr.tensorboard:
                self.tracker = TensorBoardMirror(self.tracker, self.run_dir, (self.run_dir / PLAN_FILE).read_text())
        if self.checkpointer:
            self.checkpointer.record(self.tracker.run_id, layout_of(plan))

    def fit(self) -> Outcome:
        """Train with the hooks; mark the MLflow run FINISHED, KILLED or FAILED whatever happens."""
        from launcher.train.engine import Engine

        config = self.config
        outcome = Outcome(plan=self.plan, run_id=self.tracker.run_id, run_dir=self.run_dir, model=self.built.model)
        status, requeue_job = "FAILED", False
        requeues = self.plan.strategy.requeues
        extra = (REQUEUE_SIGNAL,) if requeues else ()
        with PreemptionGuard(config.checkpoint.save_on_preemption or requeues, extra) as guard:
            hooks = self._hooks(guard)
            if self.position is not None:
                hooks.load_state(self.sidecar)
                healed = self.metrics_hook.healed
                print(
                    f"Resuming at {self.position}" + (f"; re-logged {healed} epoch(s) of metrics" if healed else ""),
                    flush=True,
                )
            try:
                engine = Engine(
                    self.built,
                    self.plan,
                    self.source,
                    seed=config.seed,
                    shuffle_buffer=config.dataset.shuffle_buffer,
                    callbacks=self.built.callbacks,
                    guard=numerics_guard(config, self.plan),
                    telemetry=config.train.telemetry,
                    freezer=self.freezer,
                )
                outcome.result = engine.fit(config.train.epochs, start=self.position, hooks=hooks)
                outcome.stop_reason = self._stop_reason(outcome.result)
                self.tracker.set_tags({"stop_reason": outcome.stop_reason, **self._pruned_tags()})
                self.finish(outcome.result, engine)
                outcome.weights_sha256 = self.weights_sha256
                status = "FINISHED"
            except Preempted as stop:
                if stop.by_budget:  # train.max_time: a planned end of this launch, not a failure
                    status, outcome.stop_reason = "FINISHED", "max_time"
                    self.tracker.set_tags({"stop_reason": "max_time", "stop_position": str(stop.position)})
                    budget = show_duration(self.plan.schedule.max_time_seconds)
                    print(
                        f"\ntrain.max_time={budget} reached at {stop.position}. Checkpoint saved; run the same "
                        "command again to continue.",
                        flush=True,
                    )
                    return outcome
                status = "KILLED"
                requeue_job = requeues and stop.signum == REQUEUE_SIGNAL and self.plan.is_chief
                then = "Slurm requeues the job" if requeue_job else "re-run the same command to resume"
                print(f"\nPreempted: {stop}. Checkpoint saved; {then}.", flush=True)
                outcome.error, outcome.exit_code = str(stop), 128 + stop.signum
                if requeue_job:
                    self.tracker.set_tags({"slurm.requeue": os.environ.get("SLURM_JOB_ID", "")})
            except KeyboardInterrupt:
                status = "KILLED"
                raise
            except NumericsStop as stop:  # the diagnosis says it all: no traceback
                print(
                    f"\n{stop}\nThe MLflow run is marked FAILED; the last checkpoint is untouched.",
                    file=sys.stderr,
                    flush=True,
                )
                outcome.error = f"NumericsStop: {stop.kind} at global step {stop.step}"
                outcome.failure = NUMERICS_STOP
                self.tracker.set_tags(
                    {
                        "error": outcome.error,
                        "numerics.stop": stop.kind,
                        "numerics.stop_step": str(stop.step),
                        "numerics.diagnosis": str(stop)[:4900],
                    }
                )
            except CheckpointWriteError as err:  # the message says it all: no traceback
                print(f"\n{err}\nThe MLflow run is marked FAILED.", file=sys.stderr, flush=True)
                outcome.error, outcome.failure = f"CheckpointWriteError: {err}", CHECKPOINT_WRITE
                self.tracker.set_tags({"error": outcome.error})
            except Exception as err:
                traceback.print_exc()
                print("\nTraining failed; the MLflow run is marked FAILED.", file=sys.stderr)
                outcome.error, outcome.failure = f"{type(err).__name__}: {err}", TRAINING_FAILURE
                self.tracker.set_tags({"error": outcome.error})
            finally:
                self.tracker.end(status)
        if requeue_job:  # last: Slurm stops this job as it requeues it
            done, said = requeue()
            print(said, flush=True)
            if not done:
                outcome.error = f"{outcome.error}; {said}"
        return outcome

    def finish(self, result: FitResult, engine) -> None:
        """Export the model (and the best one) to the run dir and MLflow, test it (train.test_at_end); print the
        summary."""
        if self.config.checkpoint.export_model and self.plan.is_chief:
            export_model(self.built.model, self.run_dir / "model.keras")
            self.tracker.log_artifact(self.run_dir / "model.keras", "model")
            if self.best_hook is not None and self.best_hook.exported:
                self.tracker.log_artifact(self.best_hook.exported, "model")
            reloaded = _Reloaded(self.run_dir / "model.keras")
            exported = self._export_for_serving(reloaded)
            if self.remote is not None:  # beside the checkpoints, where a machine without this disk finds them
                self.remote.push_file(self.run_dir / "model.keras")
                if self.best_hook is not None and self.best_hook.exported:
                    self.remote.push_file(Path(self.best_hook.exported))
                if "tflite" in exported.written:
                    self.remote.push_file(exported.written["tflite"])
            self._log_mlflow_model(reloaded)
        self._final_weights_agree()
        tested = self._test(engine)
        hint = self.tracker.ui_hint if self.plan.is_chief else "logged by the chief (worker 0)"
        _print_summary(result, self.run_dir, hint, [m.name for m in self.built.task.train_metrics], tested)

    def _test(self, engine) -> dict[str, float]:
        """train.test_at_end: the best checkpoint's weights (else the final ones) evaluated once on the test split,
        after the final model is exported (so the exported model stays the final one)."""
        if self.plan.schedule.test_steps is None:
            return {}
        best = self.checkpointer.best_manager.latest_checkpoint if self.checkpointer and self.best_hook else None
        epoch = self.plan.schedule.epochs - 1
        if best:
            self.checkpointer.checkpoint.restore(best).expect_partial()
            epoch = int(self.best_hook.best.get("epoch", epoch))
        metrics = engine.evaluate("test")
        self.tracker.log_metrics(metrics, step=epoch)
        self.tracker.set_tags({"test.model": f"best ({Path(best).name}, epoch {epoch + 1})" if best else "final"})
        self.tracker.flush()
        return metrics

    def _export_for_serving(self, reloaded: _Reloaded):
        """export.formats' SavedModel and TFLite, from model.keras; each logged, a failed one said, not fatal."""
        formats = self.plan.export.formats
        if not {"saved_model", "tflite"} & set(formats):
            return ServingExports()
        exported = export_serving(reloaded.model, self.built.task, self.source, self.run_dir, formats)
        tags = {f"export.{name}": f"failed: {why}" for name, why in exported.failed.items()}
        for name, path in exported.written.items():
            tags[f"export.{name}"] = exported.notes.get(name, "written")
            if path.is_dir():
                self.tracker.log_artifacts(path, f"model/{path.name}")
            else:
                self.tracker.log_artifact(path, "model")
            print(f"  export   {name:<12} {path}" + (f"  ({exported.notes[name]})" if name in exported.notes else ""))
        for name, why in exported.failed.items():
            print(f"WARNING: export.formats {name}: not exported ({why}); the run and its other exports stand.")
        self.tracker.set_tags(tags)
        return exported

    def _final_weights_agree(self) -> None:
        """Multi-worker: the final weights' digest must be the same on every worker, or the run fails."""
        if self.agreement is None:
            return

        self.weights_sha256 = weights_digest(self.built.model.get_weights())
        digests = self.agreement.gather_text(self.weights_sha256)
        identical = len(set(digests)) == 1
        self.tracker.set_tags({"multi_worker.weights_identical": str(identical).lower()})
        if not identical:
            raise RuntimeError(
                "workers ended with different weights: "
                + ", ".join(f"worker {rank} sha256 {d[:12]}" for rank, d in enumerate(digests))
            )
        print(f"  final weights identical on {len(digests)} workers (sha256 {self.weights_sha256[:12]})", flush=True)

    def _log_mlflow_model(self, reloaded: _Reloaded) -> None:
        tr = self.config.tracking
        if not tr.enabled or not tr.log_model:
            return
        saved = save_mlflow_model(reloaded.model, self.source.first_inputs(), self.run_dir / MODEL_ARTIFACT)
        self.tracker.log_artifacts(saved, MODEL_ARTIFACT)
        if tr.register_model:
            self.tracker.register_model(tr.register_model, MODEL_ARTIFACT)

    # ---------------------------------------------------------------- helpers

    def _hooks(self, guard) -> HookList:
        """One hook per job, in the order their work must happen at an epoch end."""

        cfg, steps_in = self.config.checkpoint, self.plan.schedule.steps_in_epoch
        history, callback_state = HistoryHook(), CallbackStateHook()
        self.metrics_hook = MetricsHook(self.tracker, val_by_step=self.plan.schedule.val_every_steps is not None)
        self.best_hook = None
        if cfg.monitor:
            export = self.run_dir / "best.keras" if cfg.export_model and self.plan.is_chief else None
            self.best_hook = BestModelHook(cfg.monitor, cfg.mode.value, self.checkpointer, self.built.model, export)
        stateful = HookList(h for h in (history, self.best_hook, callback_state, self.metrics_hook) if h is not None)
        stop_agreement = None
        if self.agreement is not None:
            guard.agree = self.agreement.any_stop
            stop_agreement = StopAgreementHook(guard)
        budget = self.plan.schedule.max_time_seconds
        hooks = [
            TimeBudgetHook(budget, guard, process_age_seconds) if budget else None,
            stop_agreement,
            FaultHook() if self.plan.has(FaultPlan) else None,
            self._utilization_hook(),
            self._profiler_hook(),
            history,
            self.best_hook,
            callback_state,
        ]
        if self.trial is not None and self.plan.is_chief:
            self.pruning_hook = PruningHook(self.trial, self.plan.schedule.val_every_steps is not None)
            hooks.append(self.pruning_hook)
        if self.checkpointer:
            hooks.append(CheckpointHook(self.checkpointer, SavePolicy.from_config(cfg), guard, steps_in, stateful))
        hooks += [self._step_metrics_hook(), self.metrics_hook, PreemptionHook(guard, steps_in)]
        return HookList(h for h in hooks if h is not None)

    def _stop_reason(self, result: FitResult) -> str:
        """Why training ended: its trial was pruned, early stopping, train.max_steps, or its epochs."""
        if self.pruning_hook is not None and self.pruning_hook.pruned_at is not None:
            return "pruned"
        if result.stopped_early:
            return "early_stopping"
        return "max_steps" if self.plan.schedule.max_steps is not None else "epochs"

    def _pruned_tags(self) -> dict[str, str]:
        """Where a pruned trial stopped and the steps its schedule did not run ({} for any other run)."""
        if self.pruning_hook is None or self.pruning_hook.pruned_at is None:
            return {}
        position, value = self.pruning_hook.pruned_at
        return {
            "pruned": "true",
            "pruned.epoch": str(position.epoch),
            "pruned.global_step": str(position.global_step),
            "pruned.value": f"{value:.6g}",
            "pruned.steps_saved": str(max(self.plan.schedule.total_steps - position.global_step, 0)),
        }

    def _utilization_hook(self):
        flops, peak = _utilization_inputs(self.config, self.plan, self.built.model, self.tracker, self.env)
        return UtilizationHook(flops, peak, process_age_seconds)

    def _step_metrics_hook(self):
        every = self.config.tracking.step_metrics_every
        if every <= 0 or not self.config.tracking.enabled:
            return None
        from launcher.train.engine import optimizer_logs

        optimizer = self.built.optimizer
        return StepMetricsHook(self.tracker, every, lambda: optimizer_logs(optimizer))

    def _profiler_hook(self):
        profile = self.config.train.profile
        if profile.steps <= 0:
            return None

        # Only the chief traces; every worker cuts its step chunks at the same window boundaries.
        profiler = StepProfiler(self.run_dir / "profile", profile.skip_steps, profile.steps, trace=self.plan.is_chief)
        return ProfilerHook(profiler, self.tracker)

    def _write_plan(self) -> None:
        (self.run_dir / PLAN_FILE).write_text(self.plan.to_yaml())


class _Reloaded:
    """The exported model.keras loaded once, outside the strategy, by whichever export needs it first: its predict
    runs on this process alone (the trained model's is a distributed call every multi-worker task would join)."""

    def __init__(self, path: Path):
        self.path = path
        self._model = None

    @property
    def model(self):
        if self._model is None:
            import keras

            self._model = keras.saving.load_model(self.path, compile=False)
        return self._model


def numerics_guard(config, plan):
    """The engine's NumericsGuard from train.* and the Plan's loss scaling."""

    dynamic = plan.loss_scale.mode == "dynamic"
    return NumericsGuard(
        on_nonfinite=config.train.on_nonfinite.value,
        collapse_steps=config.train.collapse_steps,
        precision=plan.precision.name,
        min_scale=config.loss_scale.min_scale if dynamic else None,
    )


def _utilization_inputs(config, plan, model, tracker, env) -> tuple[float, float]:
    """Training FLOPs per example and this machine's matmul peak for the compute dtype."""
    if not config.train.measure_utilization:
        return 0.0, 0.0

    flops = training_flops_per_example(model)
    if not flops:
        return 0.0, 0.0
    dtype = plan.precision.compute_dtype
    peak = matmul_peak(dtype, env.matmul_gflops)  # the probe's rates: no second cache read
    if not tracker.resumed:  # measurements, not settings: tags, so runs differ in params only by their config
        tracker.set_tags(
            {
                "measured.train_flops_per_example": int(flops),
                f"measured.matmul_peak_{dtype}_gflops": round(peak / 1e9, 1),
            }
        )
    return flops, peak


def _print_summary(
    result: FitResult, run_dir: Path, tracking_hint: str, metrics: list[str], tested: dict[str, float]
) -> None:
    final = {**result.final, **tested}
    if not result.epochs:
        print("\nNothing to train: the checkpoint already covers every epoch.")
    print("\nDone." + (" (stopped early)" if result.stopped_early else ""))
    for key in [*headline(metrics, ("examples_per_sec",)), *tested]:
        if key in final:
            print(f"  {key:<20} {final[key]:.4f}")
    print(f"  {'run dir':<20} {run_dir}")
    print(f"  {'MLflow':<20} {tracking_hint}")
