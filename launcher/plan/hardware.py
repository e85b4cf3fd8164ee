"""This machine's matmul rates per dtype and backend, measured once and cached: what `auto` decides by.

CPU flags do not say which precision or compiler is fastest: two CPUs with AVX-512 BF16
and no AMX measured bfloat16 matmuls at 0.55x float32 (a Xeon) and 1.9x float32 (an AMD
EPYC), and XLA's CPU matmuls are 5x slower than oneDNN's where AMX exists. So the
resolver reads measured rates (GFLOP/s of a 2048^3 matmul through TensorFlow's kernel,
"graph", and through XLA, "xla").

Measuring needs TensorFlow's runtime, which must not start before the launcher splits
the CPU into logical devices, so it runs in a child process (`python -m
launcher.plan.hardware`, ~10 s) the first time and is cached per machine and TensorFlow
version in `$LAUNCHER_CACHE/matmul_rates.json` (default `~/.cache/launcher`). Delete the
file to measure again. Concurrent launches on one machine measure once (a file lock).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

DTYPES = ("float32", "bfloat16", "float16")
BACKENDS = ("graph", "xla")
MEASURE_TIMEOUT_SEC = 300


def best_rate(rates: dict[str, float], dtype: str) -> float | None:
    """The faster of oneDNN's and XLA's rate for `dtype` (None when not measured)."""
    return max((rates[f"{dtype}_{b}"] for b in BACKENDS if rates.get(f"{dtype}_{b}")), default=None)


def cache_file() -> Path:
    return Path(os.environ.get("LAUNCHER_CACHE", Path.home() / ".cache" / "launcher")) / "matmul_rates.json"


def machine_key(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """CPU model, flags and core count, and the TensorFlow version: what the rates depend on."""
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        lines = []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")
    flags = next((line.split(":", 1)[1] for line in lines if line.startswith(("flags", "Features"))), "")
    digest = hashlib.sha1(" ".join(sorted(flags.split())).encode()).hexdigest()[:12]
    try:
        tf_version = metadata.version("tensorflow")
    except metadata.PackageNotFoundError:
        tf_version = "unknown"
    return f"{model}|{os.cpu_count()}|{digest}|tf{tf_version}"


def measured_rates() -> dict[str, float]:
    """GFLOP/s keyed "<dtype>_<backend>" (e.g. "bfloat16_graph"); {} when measuring failed."""
    path, key = cache_file(), machine_key()
    cached = _read(path).get(key)
    if cached:
        return cached
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another launch may be measuring: wait for its result
            cached = _read(path).get(key)
            if cached:
                return cached
            rates = _measure_in_child()
            if rates:
                _write(path, {**_read(path), key: rates})
            return rates
    except OSError:
        return _measure_in_child()


def _measure_in_child() -> dict[str, float]:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "launcher.plan.hardware"],
            capture_output=True,
            text=True,
            timeout=MEASURE_TIMEOUT_SEC,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
        return {k: float(v) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}
    except (subprocess.SubprocessError, OSError, ValueError, IndexError, AttributeError):
        return {}


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


# ------------------------------------------------------------- measuring (needs TensorFlow)


def matmul_rates(dtype: str, size: int = 2048, seconds: float = 1.0) -> dict[str, float]:
    """FLOP/s of a size^3 matmul through TensorFlow's kernel ("graph") and through XLA ("xla")."""
    return {backend: measure_matmul(dtype, size, seconds, jit_compile=backend == "xla") for backend in BACKENDS}


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


def measure_all(seconds: float = 0.75) -> dict[str, float]:
    return {
        f"{dtype}_{backend}": round(rate / 1e9, 1)
        for dtype in DTYPES
        for backend, rate in matmul_rates(dtype, seconds=seconds).items()
    }


if __name__ == "__main__":
    print(json.dumps(measure_all()))
