"""The stats vector every step returns, and `Totals`, which reads it by name on the host.

One vector per step, so one all-reduce carries it across replicas: the step functions (`launcher.train.steps`)
write it by these positions on the device, the engine sums and reads it per chunk and per epoch. Kept in one
place so both sides agree on the layout.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

import numpy as np

# The stats vector of a replica-step, summed across replicas: the loss sum and the examples, then (training
# only) the unscaled gradient norm when finite and the count of finite norms.
LOSS_SUM, EXAMPLES, GRAD_NORM_SUM, FINITE_NORMS = range(4)
STATS, TRAIN_STATS = 2, 4


@dataclass
class Totals:
    """A chunk's or an epoch's summed stats vector, by name."""

    loss_sum: float = 0.0
    examples: float = 0.0
    grad_norm_sum: float = 0.0
    finite_norms: float = 0.0

    @classmethod
    def of(cls, vector) -> Totals:
        values = [float(v) for v in np.asarray(vector, dtype=np.float64)]
        return cls(*values, *([0.0] * (TRAIN_STATS - len(values))))

    def __add__(self, other: Totals) -> Totals:
        return Totals(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    @property
    def loss(self) -> float:
        return self.loss_sum / max(self.examples, 1.0)

    @property
    def grad_norm(self) -> float:
        """The mean finite unscaled gradient norm (NaN when no step had one)."""
        return self.grad_norm_sum / self.finite_norms if self.finite_norms else float("nan")
