"""What happens around the engine's steps: checkpoints, best model, MLflow metrics, preemption, profiling."""

from __future__ import annotations

import math
import signal
import threading
from pathlib import Path

from launcher.engine import Hooks, Position, Preempted

EARLY_STOPPING_FIELDS = ("wait", "best", "best_epoch", "stopped_epoch")


class PreemptionGuard:
    """While active, SIGTERM/SIGINT only set a flag; training saves and stops at the next step boundary.

    A second signal falls through to the previous handler (Ctrl-C twice still kills).
    """

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame):
        if self.signum is not None:
            previous = self._previous.get(signum)
            if callable(previous):
                previous(signum, frame)
            raise KeyboardInterrupt
        self.signum = signum
        print(f"\nSignal {signal.Signals(signum).name}: saving at the next step boundary, then stopping.", flush=True)

    def __enter__(self):
        if self.enabled and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False


class RunHooks(Hooks):
    def __init__(self, *, checkpointer, tracker, guard, steps_per_epoch, checkpoint_cfg, is_chief,
                 run_dir: Path, model, history=None, best=None, early_stopping=None,
                 flops_per_example: float = 0.0, peak_flops: float = 0.0, profiler=None):
        self.checkpointer = checkpointer
        self.tracker = tracker
        self.guard = guard
        self.steps_per_epoch = steps_per_epoch
        self.cfg = checkpoint_cfg
        self.is_chief = is_chief
        self.run_dir = run_dir
        self.model = model
        self.history = list(history or [])
        self.best = dict(best or {})
        self._early_stopping_state = early_stopping or {}
        self._callbacks = None
        self.best_model_path: Path | None = None
        self.flops_per_example = flops_per_example
        self.peak_flops = peak_flops
        self.time_to_first_step: float | None = None
        self._first_step_logged = False
        self.profiler = profiler

    # ----------------------------------------------------------- engine

    def on_train_begin(self, callbacks) -> None:
        self._callbacks = callbacks
        for callback in _early_stoppers(callbacks):
            for field in EARLY_STOPPING_FIELDS:
                if field in self._early_stopping_state:
                    setattr(callback, field, self._early_stopping_state[field])

    def steps_until_boundary(self, position: Position) -> int | None:
        limits = [
            self.checkpointer.steps_until_save(position) if self.checkpointer else None,
            self.profiler.steps_until_boundary(position.global_step) if self.profiler else None,
        ]
        return min((n for n in limits if n), default=None)

    def after_steps(self, position: Position) -> None:
        if self.time_to_first_step is None:
            from launcher.utilization import process_age_seconds

            self.time_to_first_step = process_age_seconds()
        if self.profiler:
            self.profiler.after_steps(position.global_step)  # reported at the end, outside the timed steps
        # The guard is only armed when save_on_preemption is on, so a signal here means: save and stop.
        preempted = self.guard.signum is not None
        # Saves due on the epoch's last step (and a signal seen there) happen at the epoch end, after evaluation.
        if position.step_in_epoch >= self.steps_per_epoch:
            return
        if self.checkpointer and (preempted or self.checkpointer.step_save_due(position)):
            self._save(position)  # once, even when a step save and a signal coincide
        if preempted:
            raise Preempted(self.guard.signum, position)

    def on_epoch_end(self, position: Position, logs: dict) -> None:
        epoch = position.epoch - 1
        if self.flops_per_example and self.peak_flops:
            logs["model_flops_utilization"] = logs["examples_per_sec"] * self.flops_per_example / self.peak_flops
        if self.time_to_first_step is not None and not self._first_step_logged:
            # Process start to the end of the first training step (this process: after a resume, its own).
            logs["time_to_first_step_sec"] = self.time_to_first_step
            self._first_step_logged = True
        self.history.append({"epoch": epoch, **logs})
        self._track_best(position, logs)
        if self.checkpointer and (
            self.checkpointer.epoch_save_due(position.epoch) or self.checkpointer.step_save_due(position)
            or self.guard.signum is not None
        ):
            self._save(position)
        # Metrics after the save: a kill in between is healed on resume from the sidecar history.
        self.tracker.log_metrics(logs, step=epoch)
        if self.guard.signum is not None:
            raise Preempted(self.guard.signum, position)

    def on_train_end(self, position: Position) -> None:
        """Report the trace (also a window cut short by the end of training): parsing it and
        uploading it to MLflow would otherwise land inside an epoch's measured time."""
        if not self.profiler:
            return
        self.profiler.stop(position.global_step)
        if self.profiler.traced_steps:
            self.report_profile()

    # ------------------------------------------------------------ parts

    def report_profile(self) -> None:
        text = self.profiler.report(header=f"Profile of {self.profiler.traced_steps} training step(s), "
                                          f"trace in {self.profiler.logdir}")
        print(f"\n{text}", flush=True)
        self.tracker.log_artifacts(self.profiler.logdir, "profile")

    def _save(self, position: Position) -> None:
        self.checkpointer.save(position, self.extra_state())

    def extra_state(self) -> dict:
        return {
            "history": self.history,
            "best": self.best,
            "early_stopping": self._early_stopping(),
            "mlflow_run_id": self.tracker.run_id,
        }

    def _early_stopping(self) -> dict:
        for callback in _early_stoppers(self._callbacks):
            return {f: _plain(getattr(callback, f, None)) for f in EARLY_STOPPING_FIELDS}
        return {}

    def _track_best(self, position: Position, logs: dict) -> None:
        monitor = self.cfg.monitor
        if not monitor or monitor not in logs or not math.isfinite(logs[monitor]):
            return
        value = float(logs[monitor])
        previous = self.best.get("value")
        better = previous is None or (value < previous if self.cfg.mode.value == "min" else value > previous)
        if not better:
            return
        self.best = {"monitor": monitor, "value": value, "epoch": position.epoch - 1}
        if self.checkpointer:
            self.checkpointer.save_best(position)
        if self.is_chief and self.cfg.export_model:
            self.best_model_path = self.run_dir / "best.keras"
            export_model(self.model, self.best_model_path)

    def heal_metric_gaps(self) -> int:
        """Log epochs the sidecar history has but MLflow does not (killed between save and log)."""
        logged = self.tracker.logged_steps("loss")
        missing = [entry for entry in self.history if entry["epoch"] not in logged]
        for entry in missing:
            logs = {k: v for k, v in entry.items() if k != "epoch"}
            self.tracker.log_metrics(logs, step=entry["epoch"])
        return len(missing)


def export_model(model, path: Path) -> None:
    """Save the trained network as .keras (without the training-only optimizer state)."""
    optimizer = model.optimizer
    model.optimizer = None
    try:
        model.save(path)
    finally:
        model.optimizer = optimizer


def _early_stoppers(callbacks):
    import keras

    if callbacks is None:
        return []
    return [c for c in callbacks.callbacks if isinstance(c, keras.callbacks.EarlyStopping)]


def _plain(value):
    try:
        return float(value) if not isinstance(value, int | type(None)) else value
    except (TypeError, ValueError):
        return None
