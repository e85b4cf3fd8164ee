"""The precisions the launcher knows, each saying what it is: the resolver asks this table.

Adding a precision is one entry here (and its `conf/precision/<name>.yaml`; the schema's choices are made
from this table): its Keras policy, the dtype its matmuls run in, whether its gradients need loss scaling,
and which hardware runs it fast.
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


def _gpu_at_least(major: int) -> Callable[[Hardware], bool]:
    def fast(env: Hardware) -> bool:
        capability = env.gpu_min_capability
        return capability is not None and capability >= (major, 0)

    return fast


def _bf16_fast(env: Hardware) -> bool:
    return _gpu_at_least(8)(env) if env.gpus else env.cpu_has_fast_bf16


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

    @property
    def mixed(self) -> bool:
        """Computes below float32: the output layer and the loss are kept in float32."""
        return self.compute_dtype != "float32"

    @property
    def float32_variables(self) -> bool:
        """A mixed policy: variables stay float32 (a pure low-precision policy stores them in its dtype)."""
        return self.policy == "float32" or self.policy.startswith("mixed_")


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("fp32", "float32", "float32", False, lambda env: True),
        Precision("mixed", "mixed_float16", "float16", True, _gpu_at_least(7)),
        Precision("bf16", "mixed_bfloat16", "bfloat16", False, _bf16_fast),
    )
}
