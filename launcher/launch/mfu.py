"""Model FLOPs utilisation: achieved training FLOP/s as a fraction of this machine's matmul peak.

Training FLOPs per example are counted from the model's forward graph (TF's
profiler counts MatMul/Conv FLOPs) and tripled (forward + two backward matmuls).
The peak is measured once per machine with a large matmul (`launcher.plan.hardware`). It is the
faster of TensorFlow's kernel (oneDNN) and XLA's: on a CPU without AMX, XLA runs a
bfloat16 matmul much faster than oneDNN does (measured 1.7x), so a peak from oneDNN
alone would put a bf16+XLA run above 100%.
"""

from __future__ import annotations

import os
from pathlib import Path

from launcher.plan.hardware import best_rate, matmul_rates, measured_rates


def forward_flops_per_example(model) -> float:
    """FLOPs of one forward pass for a single example (0 when the graph cannot be profiled)."""
    import keras
    import tensorflow as tf
    from tensorflow.python.profiler import model_analyzer, option_builder

    # A model of named or several inputs is called with its inputs' own structure (a dict by name, a list).
    structure = _input_structure(model)
    if structure is None:
        return 0.0
    specs = [tf.TensorSpec((1, *x.shape[1:]), x.dtype) for x in keras.tree.flatten(structure)]
    concrete = tf.function(lambda *xs: model(keras.tree.pack_sequence_as(structure, list(xs)), training=False))
    graph = concrete.get_concrete_function(*specs).graph
    options = option_builder.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    try:
        info = model_analyzer.profile(graph, options=options)
    except Exception:  # profiler gaps (unknown shapes, custom ops): report no utilisation
        return 0.0
    return float(info.total_float_ops)


def _input_structure(model):
    """The inputs a model is called with: its `input` (a tensor, a dict by name, a list), or for a Sequential never
    called yet (Keras 3 defines `input` at the first call) its one declared input; None when neither is known (a
    subclassed model never built on data)."""
    try:
        return model.input
    except (AttributeError, ValueError):
        declared = getattr(model, "inputs", None) or []
        return declared[0] if len(declared) == 1 else None


def training_flops_per_example(model) -> float:
    return 3.0 * forward_flops_per_example(model)


def matmul_peak(dtype: str, rates: dict[str, float] | None = None) -> float:
    """FLOP/s of a 2048^3 matmul in `dtype` on this machine, the faster of graph and XLA.

    The same measured rates the resolver decides `auto` by (`launcher.plan.hardware`): pass
    the probe's when it has them, else they are read from the cache (or measured)."""
    best = best_rate(rates or measured_rates(), dtype)
    if best:
        return best * 1e9
    return max(matmul_rates(dtype, seconds=0.5).values())  # measuring in a child failed: measure here


def process_age_seconds() -> float | None:
    """Seconds since this process started (Linux), for time-to-first-step."""
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - start_ticks / ticks
    except (OSError, ValueError, IndexError):
        return None
