"""BatchNormalization's moving averages need training steps: a run too short for them validates and exports a
model whose normalisation statistics are still close to their initial values (mean 0, variance 1).

The issue's case: `model=cnn precision=bf16` on the digits, 110 steps at Keras's default momentum 0.99, ended at
validation accuracy 0.22 with training accuracy 0.95 (plain Keras `fit` of the same network does the same). A
moving average with momentum m forgets its initial value by m**steps: after 3/(1-m) steps it weighs e**-3, about
5%; before that it still dominates. Pure: the facts (each layer's momentum, the run's steps) are given; the
twin one level down, `launcher.train.batch_norm`, reads them from the built model.
"""

from __future__ import annotations

import math

SETTLE = 3.0  # time constants (steps x (1 - momentum)) before the initial statistics weigh under 5%


def steps_to_settle(momentum: float) -> int:
    """Training steps a moving average with this momentum (< 1) needs to forget its initial value (to about 5%)."""
    return math.ceil(round(SETTLE / (1.0 - momentum), 6))  # 3 / (1 - 0.99) is 300.0000000000003 in floats


def moving_average_warning(momenta: dict[str, float], total_steps: int, steps_per_epoch: int) -> str | None:
    """A warning with its fixes when the run's `total_steps` are too few for the slowest layer's momentum
    (`momenta`: each BatchNormalization layer's path -> momentum), else None."""
    slow = {path: m for path, m in momenta.items() if 0 <= m < 1 and total_steps < steps_to_settle(m)}
    if not slow or total_steps < 1:
        return None
    momentum = max(slow.values())
    needed = steps_to_settle(momentum)
    epochs = math.ceil(needed / max(steps_per_epoch, 1))
    fits = math.floor((1.0 - SETTLE / total_steps) * 100) / 100  # the largest momentum that settles in this run
    shown = ", ".join(sorted(slow)[:3]) + (f" and {len(slow) - 3} more" if len(slow) > 3 else "")
    lower = (
        f", or a lower momentum in the model (keras.layers.BatchNormalization(momentum={fits:g}) settles in "
        f"{total_steps} steps)"
        if fits > 0
        else ""  # too few steps for any averaging worth the name
    )
    return (
        f"BatchNormalization ({shown}) with momentum {momentum:g} needs about {needed} training steps for its moving "
        f"averages to settle (3/(1-momentum)); this run has {total_steps}: validation and the exported model would "
        "normalise with statistics still near their initial values, far from training's (validation accuracy can "
        f"stay near chance while training's rises). Fix: train.epochs={epochs} (>= {needed} steps){lower}."
    )
