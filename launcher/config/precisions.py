"""The precisions the launcher knows, each saying what it is: the resolver asks this table.

Adding a precision is one entry here (and its `conf/precision/<name>.yaml`; the schema's choices are made
from this table): its Keras policy, the dtype its matmuls run in, whether its gradients need loss scaling,
which hardware runs it fast and has its instructions, and where `precision=auto` ranks it. `precision=auto`,
tune=auto's candidates, the doctor and the numerics guard's advice read these facts, never a precision's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class Hardware(Protocol):
    """What the fast-path tests read (`launcher.plan.environment.Environment` is one)."""

    gpus: tuple
    gpu_min_capability: tuple[int, int] | None
    cpu_has_fast_bf16: bool
    has_amx: bool
    has_avx512_bf16: bool


def _gpu_at_least(major: int) -> Callable[[Hardware], bool]:
    def fast(env: Hardware) -> bool:
        capability = env.gpu_min_capability
        return capability is not None and capability >= (major, 0)

    return fast


def _bf16_fast(env: Hardware) -> bool:
    return _gpu_at_least(8)(env) if env.gpus else env.cpu_has_fast_bf16


def _bf16_instructions(env: Hardware) -> bool:
    return env.has_amx or env.has_avx512_bf16


def _gpu_or_cpu(gpu: str, cpu: str) -> Callable[[Hardware], str]:
    """A reason naming the GPUs' lowest compute capability, or the CPU's."""

    def reason(env: Hardware) -> str:
        capability = env.gpu_min_capability
        if capability is None:
            return cpu
        return f"GPU compute capability {capability[0]}.{capability[1]} {gpu}"

    return reason


@dataclass(frozen=True)
class Precision:
    """One precision choice (`precision=<name>`)."""

    name: str
    policy: str
    """Keras dtype policy name."""
    compute_dtype: str
    """The dtype matmuls and activations compute in (variables stay float32 under a mixed policy)."""
    needs_loss_scaling: bool
    """float16 gradients underflow to zero without scaling."""
    fast_on: Callable[[Hardware], bool]
    """True where this hardware has a fast path for the compute dtype."""
    float32_range: bool
    """The compute dtype has float32's exponent range: what overflows float16 fits."""
    preference: int
    """precision=auto takes, of the precisions fast on the hardware, the one of highest preference."""
    auto_reason: Callable[[Hardware], str]
    """Why precision=auto picks it on this hardware (where it is the fast one of highest preference): the Plan's
    reason."""
    cpu_instructions: Callable[[Hardware], bool] | None
    """Whether this CPU has instructions for the compute dtype (else it is emulated: always slower); None: no CPU
    has them, only GPUs run it."""

    @property
    def mixed(self) -> bool:
        """Computes below float32: the output layer and the loss are kept in float32."""
        return self.compute_dtype != "float32"

    @property
    def float32_variables(self) -> bool:
        """A mixed policy: variables stay float32 (a pure low-precision policy stores them in its dtype)."""
        return self.policy == "float32" or self.policy.startswith("mixed_")

    @property
    def baseline(self) -> bool:
        """Computes in float32: what the other precisions are compared with (the doctor's first trial, tune=auto's
        numerics note) and what a run that goes wrong in a reduced precision can fall back to."""
        return not self.mixed

    @property
    def overflow_safe(self) -> bool:
        """Computes below float32 with float32's range and no loss scaling: where a float16 run that overflows can
        go and stay fast."""
        return self.mixed and self.float32_range and not self.needs_loss_scaling

    def native_on(self, env: Hardware) -> bool:
        """This hardware has instructions for the compute dtype (every GPU; a CPU as `cpu_instructions` says)."""
        return bool(env.gpus) or (self.cpu_instructions is not None and self.cpu_instructions(env))


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision(
            "fp32",
            "float32",
            "float32",
            False,
            lambda env: True,
            float32_range=True,
            preference=0,
            auto_reason=_gpu_or_cpu(
                "< 7.0 has no fast reduced precision",
                "CPU without AMX and matmul rates not measured: float32 is the safe choice",
            ),
            cpu_instructions=lambda env: True,
        ),
        Precision(
            "mixed",
            "mixed_float16",
            "float16",
            True,
            _gpu_at_least(7),
            float32_range=False,
            preference=1,
            auto_reason=_gpu_or_cpu("has float16 tensor cores but no bfloat16", "no CPU runs float16 fast"),
            cpu_instructions=None,
        ),
        Precision(
            "bf16",
            "mixed_bfloat16",
            "bfloat16",
            False,
            _bf16_fast,
            float32_range=True,
            preference=2,
            auto_reason=_gpu_or_cpu(
                ">= 8.0 has bfloat16 tensor cores",
                "CPU has AMX: oneDNN runs bfloat16 matmuls several times faster than float32 (not measured)",
            ),
            cpu_instructions=_bf16_instructions,
        ),
    )
}


def by_preference() -> list[Precision]:
    """The precisions, the one precision=auto prefers first."""
    return sorted(PRECISIONS.values(), key=lambda p: p.preference, reverse=True)


def auto_choice(env: Hardware) -> Precision:
    """What precision=auto takes by the hardware: the fast precision of highest preference (float32 is fast
    everywhere)."""
    return next(p for p in by_preference() if p.fast_on(env))


def baseline() -> Precision:
    """The float32 precision (`Precision.baseline`)."""
    return next(p for p in PRECISIONS.values() if p.baseline)


def overflow_safe() -> list[Precision]:
    """The reduced precisions a float16 run that overflows can switch to (`Precision.overflow_safe`), preferred
    first."""
    return [p for p in by_preference() if p.overflow_safe]
