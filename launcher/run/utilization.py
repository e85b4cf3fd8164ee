"""Model FLOPs utilisation: achieved training FLOP/s as a fraction of this machine's matmul peak.

Training FLOPs per example are counted from the model's forward graph (TF's
profiler counts MatMul/Conv FLOPs) and tripled (forward + two backward matmuls).
The peak is measured here, once per dtype, with a large matmul, and cached. It is the
faster of TensorFlow's kernel (oneDNN) and XLA's: on a CPU without AMX, XLA runs a
bfloat16 matmul much faster than oneDNN does (measured 1.7x), so a peak from oneDNN
alone would put a bf16+XLA run above 100%.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from launcher.files import read_json

CACHE = Path(os.environ.get("LAUNCHER_CACHE", Path.home() / ".cache" / "launcher")) / "matmul_peak.json"
COMPUTE_DTYPE = {"float32": "float32", "mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}


def forward_flops_per_example(model) -> float:
    """FLOPs of one forward pass for a single example (0 when the graph cannot be profiled)."""
    import tensorflow as tf
    from tensorflow.python.profiler import model_analyzer, option_builder

    specs = [tf.TensorSpec((1, *x.shape[1:]), x.dtype) for x in model.inputs]
    concrete = tf.function(lambda *xs: model(list(xs) if len(xs) > 1 else xs[0], training=False))
    graph = concrete.get_concrete_function(*specs).graph
    options = option_builder.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    try:
        info = model_analyzer.profile(graph, options=options)
    except Exception:  # profiler gaps (unknown shapes, custom ops): report no utilisation
        return 0.0
    return float(info.total_float_ops)


def training_flops_per_example(model) -> float:
    return 3.0 * forward_flops_per_example(model)


def matmul_peak(dtype: str, size: int = 2048, seconds: float = 1.0) -> float:
    """FLOP/s of a size^3 matmul in `dtype` on this machine, the faster of graph and XLA
    (measured once, then cached)."""
    key = f"{platform.node()}:{os.cpu_count()}:{dtype}:{size}:best-of-graph-xla"
    cache = _read_cache()
    if key in cache:
        return cache[key]
    peak = max(matmul_rates(dtype, size, seconds / 2).values())
    cache[key] = peak
    try:
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        CACHE.write_text(json.dumps(cache))
    except OSError:
        pass
    return peak


def matmul_rates(dtype: str, size: int = 2048, seconds: float = 1.0) -> dict[str, float]:
    """FLOP/s of a size^3 matmul through TensorFlow's kernel ("graph") and through XLA ("xla")."""
    return {mode: measure_matmul(dtype, size, seconds, jit_compile=mode == "xla") for mode in ("graph", "xla")}


def measure_matmul(dtype: str, size: int = 2048, seconds: float = 1.0, jit_compile: bool = False) -> float:
    import tensorflow as tf

    with tf.device("/cpu:0" if not tf.config.list_logical_devices("GPU") else "/gpu:0"):
        a = tf.cast(tf.random.normal((size, size)), dtype)
        b = tf.cast(tf.random.normal((size, size)), dtype)
        matmul = tf.function(lambda a, b: tf.matmul(a, b), jit_compile=jit_compile)
        matmul(a, b).numpy()
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            result = matmul(a, b)
            count += 1
        result.numpy()
        elapsed = time.perf_counter() - start
    return 2.0 * size**3 * count / elapsed


def _read_cache() -> dict:
    return read_json(CACHE, {})


def process_age_seconds() -> float | None:
    """Seconds since this process started (Linux), for time-to-first-step."""
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - start_ticks / ticks
    except (OSError, ValueError, IndexError):
        return None
