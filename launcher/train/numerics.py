"""What the compiled step counts about numerics, and when a run must stop instead of running on.

The training chunk keeps its counters on the device (skipped steps, the streak of consecutive
skips, steps with the loss scale at its floor, the unscaled gradient norm, the first non-finite
loss) and returns them once per chunk with the loss totals: no host sync per step. `NumericsGuard`
reads them on the host and raises `NumericsStop` with a diagnosis a person can act on. TF-free, so
the rules are unit-tested without a runtime.

The same concept one level up: `launcher.plan.rules.numerics` decides what is guarded here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from launcher.config.precisions import PRECISIONS, baseline, overflow_safe
from launcher.contract import EXIT_FAILED, FAILED, NUMERICS_STOP, Ending, StopContext

STOP = "stop"
SKIP = "skip"


@dataclass
class ChunkTelemetry:
    """One chunk of steps as the device counted it. Step numbers are global (1-based: after the step)."""

    first_step: int  # global step of the chunk's first step
    ran: int  # steps run (fewer than asked when a non-finite loss stopped the chunk)
    skipped: int  # steps the loss-scale optimizer skipped (non-finite gradients)
    skip_streak: int  # consecutive skipped steps at the chunk's end (carried across chunks)
    floor_streak: int  # consecutive steps with the dynamic loss scale at its minimum, at the chunk's end
    grad_norm: float  # mean unscaled global gradient norm over finite replica-steps (nan: none finite)
    nonfinite_loss_step: int | None  # global step whose loss was NaN/inf (on_nonfinite=stop ends the chunk there)
    nonfinite_loss_value: float = math.nan
    losses: list[float] = field(default_factory=list)  # per step, mean over the global batch
    scales: list[float] = field(default_factory=list)  # per step, after the step (empty: no loss scaling)
    skips: list[bool] = field(default_factory=list)  # per step
    grads_finite: list[bool] = field(default_factory=list)  # per step: every replica's gradient norm finite

    @property
    def last_step(self) -> int:
        return self.first_step + self.ran - 1


class NumericsStop(Exception):
    """Training stopped on a numerics failure; the message is the diagnosis (what, where, what to try)."""

    def __init__(self, kind: str, step: int, diagnosis: str, scale: float | None = None):
        super().__init__(diagnosis)
        self.kind = kind
        self.step = step
        self.scale = scale

    def ending(self, context: StopContext) -> Ending:
        """FAILED, not restarted (it would fail the same way); the diagnosis says it all: no traceback."""
        error = f"NumericsStop: {self.kind} at global step {self.step}"
        return Ending(
            FAILED,
            EXIT_FAILED,
            error=error,
            failure=NUMERICS_STOP,
            tags={
                "error": error,
                "numerics.stop": self.kind,
                "numerics.stop_step": str(self.step),
                "numerics.diagnosis": str(self)[:4900],
            },
            message=f"\n{self}\nThe MLflow run is marked FAILED; the last checkpoint is untouched.",
            to_stderr=True,
        )


@dataclass
class NumericsGuard:
    """`train.on_nonfinite` and `train.collapse_steps` applied to each chunk's telemetry."""

    on_nonfinite: str = STOP
    collapse_steps: int = 0  # 0: never stop on skips
    precision: str = field(default_factory=lambda: baseline().name)  # its name in the precision table
    min_scale: float | None = None  # the dynamic scale's floor; None: no dynamic loss scaling

    def check(self, t: ChunkTelemetry) -> None:
        scale = t.scales[-1] if t.scales else None
        if t.nonfinite_loss_step is not None and self.on_nonfinite == STOP:
            raise NumericsStop("nonfinite_loss", t.nonfinite_loss_step, self._nonfinite_loss(t, scale), scale)
        if not self.collapse_steps:
            return
        if t.skip_streak >= self.collapse_steps:
            raise NumericsStop("skipped_steps", t.last_step, self._skipping(t, scale), scale)
        if self.min_scale is not None and t.floor_streak >= self.collapse_steps:
            raise NumericsStop("scale_at_minimum", t.last_step, self._at_floor(t, scale), scale)

    # ------------------------------------------------------------ messages

    def _nonfinite_loss(self, t: ChunkTelemetry, scale: float | None) -> str:
        value = "NaN" if math.isnan(t.nonfinite_loss_value) else f"{t.nonfinite_loss_value:g}"
        where = f"with precision={self.precision}" + (f", loss scale {scale:g}" if scale is not None else "")
        return _message(
            f"The training loss is {value} at global step {t.nonfinite_loss_step} ({where}).",
            "The forward pass produced a non-finite value (an overflowing activation, a log/exp/division out of "
            "range, NaN in the inputs) or the weights already were non-finite after a diverging update.",
            self._tries(),
        )

    def _skipping(self, t: ChunkTelemetry, scale: float | None) -> str:
        first = t.last_step - t.skip_streak + 1
        at = f"; the loss scale is {scale:g}" + (" (its minimum)" if self._at_min(scale) else "") if scale else ""
        return _message(
            f"{t.skip_streak} consecutive steps (global steps {first}-{t.last_step}) had non-finite gradients and "
            f"were skipped{at} (train.collapse_steps={self.collapse_steps}).",
            "Lowering the loss scale did not make the gradients finite: the overflow is not a scaling problem "
            "but a value out of range in the model (forward or backward) or a diverging update.",
            self._tries(),
        )

    def _at_floor(self, t: ChunkTelemetry, scale: float | None) -> str:
        return _message(
            f"The loss scale sat at its minimum ({self.min_scale:g}) for {t.floor_streak} steps up to global step "
            f"{t.last_step} (train.collapse_steps={self.collapse_steps}).",
            "float16 gradients that overflow even unscaled: scaling cannot help, and small gradients underflow.",
            self._tries(),
        )

    def _at_min(self, scale: float | None) -> bool:
        return scale is not None and self.min_scale is not None and scale <= self.min_scale

    def _tries(self) -> list[str]:
        tries = ["python -m launcher mode=doctor <the same overrides>: finds the layer and verifies a fix"]
        if PRECISIONS[self.precision].needs_loss_scaling:
            tries.append("precision.float32_layers=[<layer>]: keep the overflowing layer in float32")
            tries += [
                f"precision={p.name}: {p.compute_dtype} has float32's range (no loss scaling needed)"
                for p in overflow_safe()
            ]
        tries += ["a lower optimizer.learning_rate, or optimizer.clipnorm=1.0"]
        if self.on_nonfinite == STOP:
            tries.append(
                "train.on_nonfinite=skip: skip non-finite steps instead of stopping (the guard above "
                "still stops a run that skips train.collapse_steps in a row)"
            )
        return tries


def _message(what: str, why: str, tries: list[str]) -> str:
    return "\n".join([f"Numerics: {what}", f"  Why: {why}", "  Try:", *(f"    - {t}" for t in tries)])
