"""One trial: a short, untracked training of a config variant in this process, recorded step by step.

A trial is the launch's own path (review -> runtime -> build -> engine) with training cut to
`doctor.steps` steps, no checkpoints and no MLflow, so what fails in a trial fails the same way in
the real run. TensorFlow's devices are split once per process: every trial shares them.
"""

from __future__ import annotations

import copy
import math
import traceback
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from launcher.config.errors import ConfigError
from launcher.contract import Hook, HookList, Position
from launcher.launch.stopping import numerics_guard
from launcher.train import runtime
from launcher.train.numerics import NumericsStop

# What every trial changes: short, quiet, nothing written.
TRIAL_SETTINGS = {
    "train.epochs": 1,
    "checkpoint.enabled": False,
    "checkpoint.export_model": False,
    "tracking.enabled": False,
    "train.measure_utilization": False,
    "train.profile.steps": 0,
    "train.early_stopping.enabled": False,
    "train.reduce_lr_on_plateau.enabled": False,
    "explain": False,
}


@dataclass
class Trial:
    """What one variant did. `status`: healthy, nonfinite, collapsed, failed or refused (and, judged
    against the baseline by `diagnose`, diverged)."""

    name: str
    overrides: dict[str, Any]
    status: str = "pending"
    losses: list[float] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)
    skips: list[bool] = field(default_factory=list)
    grads_finite: list[bool] = field(default_factory=list)
    stop_kind: str | None = None
    stop_step: int | None = None
    detail: str = ""  # the diagnosis, the error or the refusal
    plan: Any = None

    @property
    def first_applied_nonfinite_step(self) -> int | None:
        """The first step whose non-finite gradients were applied, not skipped (None: every such step was skipped)."""
        applied = [not finite and not skipped for finite, skipped in zip(self.grads_finite, self.skips, strict=False)]
        return applied.index(True) + 1 if True in applied else None

    @property
    def final_loss(self) -> float:
        """Mean loss over the last quarter of the steps (one step is noise)."""
        tail = self.losses[-max(1, len(self.losses) // 4) :]
        return sum(tail) / len(tail) if tail else math.nan

    @property
    def first_loss(self) -> float:
        head = self.losses[: max(1, len(self.losses) // 8)]
        return sum(head) / len(head) if head else math.nan

    @property
    def overrides_text(self) -> str:
        return render_overrides(self.overrides)


def render_overrides(overrides: dict[str, Any]) -> str:
    """`key=value ...` as a person types them on the command line."""

    def value(v):
        if isinstance(v, Enum):
            return v.value
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, (list, tuple)):
            return "[" + ",".join(str(x) for x in v) + "]"
        return f"{v:g}" if isinstance(v, float) else str(v)

    return " ".join(f"{k}={value(v)}" for k, v in overrides.items())


def with_overrides(config, overrides: dict[str, Any]):
    """A copy of the typed config with dotted keys set; strings become the field's Enum."""
    config = copy.deepcopy(config)
    for dotted, value in overrides.items():
        *parents, leaf = dotted.split(".")
        node = config
        for part in parents:
            node = getattr(node, part)
        current = getattr(node, leaf)
        if isinstance(current, Enum) and not isinstance(value, Enum):
            value = type(current)(value)
        setattr(node, leaf, value)
    return config


class _Recorder(Hook):
    """Keeps each chunk's per-step telemetry; optionally stops after a given global step."""

    def __init__(self, trial: Trial, model, stop_after: int | None = None):
        self.trial, self.model, self.stop_after = trial, model, stop_after

    def steps_until_boundary(self, position: Position) -> int | None:
        if self.stop_after is None:
            return None
        return max(1, self.stop_after - position.global_step)

    def after_steps(self, position: Position, logs: dict) -> None:
        self._record(logs)
        if self.stop_after is not None and position.global_step >= self.stop_after:
            self.model.stop_training = True

    def on_numerics_stop(self, position: Position, logs: dict, stop: Exception) -> None:
        self._record(logs)

    def _record(self, logs: dict) -> None:
        t = logs["telemetry"]
        self.trial.losses += t.losses
        self.trial.scales += t.scales
        self.trial.skips += t.skips
        self.trial.grads_finite += t.grads_finite


@dataclass
class Trained:
    """What a trial leaves behind when asked to: the engine (its model, optimizer, data)."""

    engine: Any
    position: Position


def run_trial(
    config, name: str, overrides: dict[str, Any], steps: int, env, stop_after: int | None = None
) -> tuple[Trial, Trained | None]:
    """Train `config` + `overrides` for `steps` steps (or up to `stop_after`) and record what happened.

    Returns the trial and, when it trained, the engine and the position it stopped at (for a replay).
    """
    from launcher.launch.review import review
    from launcher.train.build import build
    from launcher.train.engine import Engine, EngineSettings

    trial = Trial(name, dict(overrides))
    trial_config = with_overrides(config, {**TRIAL_SETTINGS, "train.max_steps_per_epoch": steps, **overrides})
    checked = review(trial_config, env, lambda p: runtime.configure(p, trial_config.seed, trial_config.deterministic))
    plan, source, problems = checked.plan, checked.source, checked.problems
    trial.plan = plan
    if problems:
        trial.status, trial.detail = "refused", str(ConfigError(problems))
        return trial, None
    position = Position()
    try:
        built = build(trial_config, plan, source, checked.strategy)
        settings = EngineSettings(
            seed=trial_config.seed,
            shuffle_buffer=trial_config.dataset.shuffle_buffer,
            verbose=0,
            guard=numerics_guard(trial_config, plan),
        )
        engine = Engine(built, plan, source, settings)
        # Enough epochs for `steps` steps on a small dataset; the recorder stops at `steps` (or `stop_after`).
        epochs = math.ceil(steps / max(1, plan.schedule.steps_per_epoch))
        last = min(steps, stop_after) if stop_after is not None else steps
        if last > 0:
            engine.fit(epochs, start=position, hooks=HookList([_Recorder(trial, built.model, last)]))
        trial.status = "healthy" if all(math.isfinite(v) for v in trial.losses) else "nonfinite"
        if trial.status == "healthy" and not _weights_finite(built.model):
            # A NaN weight can hide behind relu (max(NaN, 0) is 0): a finite loss that learns nothing.
            trial.status, trial.detail = "nonfinite", "the weights became non-finite (the loss hid it)"
            # Without loss scaling nothing skipped the step: the first non-finite gradient is where it broke.
            if (applied := trial.first_applied_nonfinite_step) is not None:
                trial.stop_kind, trial.stop_step = "nonfinite_grads", applied
    except NumericsStop as stop:
        trial.status = "nonfinite" if stop.kind == "nonfinite_loss" else "collapsed"
        trial.stop_kind, trial.stop_step, trial.detail = stop.kind, stop.step, str(stop)
    except ConfigError as err:
        trial.status, trial.detail = "refused", str(err)
        return trial, None
    except Exception as err:  # a crash is a finding: the doctor names the addition that causes it
        trial.status = "failed"
        trial.detail = f"{type(err).__name__}: {_first_line(err)}"
        trial.detail += "\n" + "".join(traceback.format_exception_only(type(err), err))[-1500:]
        return trial, None
    return trial, Trained(engine, position)


def _weights_finite(model) -> bool:
    return all(np.isfinite(w).all() for w in model.get_weights() if np.issubdtype(w.dtype, np.floating))


def _first_line(err: Exception) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
