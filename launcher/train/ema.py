"""The weights' exponential moving average (`optimizer.use_ema`) where it counts: evaluation and export.

Keras keeps the average in optimizer variables and, in `model.fit`, copies it into the model only at
the end. The launcher's engine evaluates every epoch and exports the best and final models, so it
swaps the average in for exactly those moments and the trained weights back afterwards; checkpoints
hold both (the average is optimizer state), so a resumed run continues both.
"""

from __future__ import annotations

from contextlib import contextmanager


def ema_optimizer(optimizer):
    """The optimizer holding the average (inside a loss-scale optimizer), or None without EMA."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if inner is None or not getattr(inner, "use_ema", False) or not getattr(inner, "built", False):
        return None
    return inner


@contextmanager
def ema_weights(model, optimizer=None):
    """Inside: the model's trainable weights are the moving average (no-op without EMA)."""
    inner = ema_optimizer(optimizer if optimizer is not None else getattr(model, "optimizer", None))
    if inner is None:
        yield
        return
    variables = model.trainable_variables
    averages = inner._model_variables_moving_average  # Keras keeps them here (no public accessor)
    trained = [v.numpy() for v in variables]
    for variable, average in zip(variables, averages, strict=True):
        if average is not None:
            variable.assign(average)
    try:
        yield
    finally:
        for variable, value in zip(variables, trained, strict=True):
            variable.assign(value)
