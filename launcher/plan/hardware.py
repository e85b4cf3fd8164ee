"""This machine's matmul rates per dtype and backend, measured and cached: what `auto` decides by.

CPU flags do not say which precision or compiler is fastest: two CPUs with AVX-512 BF16
and no AMX measured bfloat16 matmuls at 0.55x float32 (a Xeon) and 1.9x float32 (an AMD
EPYC), and XLA's CPU matmuls are 5x slower than oneDNN's where AMX exists. So the
resolver reads measured rates (GFLOP/s of a 2048^3 matmul through TensorFlow's kernel,
"graph", and through XLA, "xla").

Measuring needs TensorFlow's runtime, which must not start before the launcher splits
the CPU into logical devices, so it runs in a child process (`python -m
launcher.plan.hardware`, ~12 s) and is cached per machine and TensorFlow version in
`$LAUNCHER_CACHE/matmul_rates.json` (default `~/.cache/launcher`). Concurrent launches on one
machine measure once (a file lock).

One sample is not a figure to bet every later run on (measured on an AMD EPYC: a first launch cached bfloat16
at 1.16x float32, minutes later the idle machine gave 2x, three times; every `precision=auto` launch in between
ran float32). So each rate is the median of interleaved rounds, with its spread, and the child notes how much
of the CPU other processes used meanwhile. A figure taken on a busy machine or whose samples disagree is
*provisional*: used, said so in the Plan, and measured again by the first launch `RETRY_SEC` after it. A sound
figure is measured again after `MAX_AGE_SEC`. A figure from before this (one sample, no age) counts as
provisional.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

DTYPES = ("float32", "bfloat16", "float16")
BACKENDS = ("graph", "xla")
MEASURE_TIMEOUT_SEC = 300
ROUNDS = 3  # interleaved: each round measures every dtype and backend once
MAX_AGE_SEC = 7 * 24 * 3600  # a sound figure is measured again after a week (a driver, a BIOS, a neighbour)
RETRY_SEC = 60.0  # a provisional figure is measured again by the first launch this long after the last try
BUSY_SHARE = 0.25  # other processes' share of the CPU while measuring above which a figure is provisional
SPREAD_LIMIT = 1.25  # max / min of one rate's samples above which a figure is provisional
DECIDING = ("float32_graph", "float32_xla", "bfloat16_graph", "bfloat16_xla")  # the rates `auto` compares
# A file the measuring child creates as its timed rounds begin (after TensorFlow's import and the compiles): whoever
# must load the machine during the rounds alone (tests/plan/test_hardware.py) waits for it.
ROUNDS_BEGUN_ENV = "LAUNCHER_MATMUL_ROUNDS_BEGUN"


@dataclass(frozen=True)
class Measurement:
    """The cached figure: each rate's median over `rounds` interleaved samples, their [min, max], when it was
    measured (and last tried), and the share of the CPU other processes used meanwhile (None: unknown)."""

    rates: dict[str, float]
    spread: dict[str, list[float]] = field(default_factory=dict)
    rounds: int = 1
    measured_at: float = 0.0
    checked_at: float = 0.0
    busy: float | None = None

    def problems(self) -> list[str]:
        """Why this figure is provisional ([] when it is sound)."""
        found = []
        if self.rounds < 2 or not self.spread:
            found.append("a single sample")
        if self.busy is not None and self.busy > BUSY_SHARE:
            found.append(f"measured while other processes used {self.busy:.0%} of the CPU")
        wide = [
            f"{key} {low:.0f}-{high:.0f}"
            for key, (low, high) in self.spread.items()
            if key in DECIDING and low > 0 and high / low > SPREAD_LIMIT
        ]
        if wide:
            found.append(f"samples disagree (> {SPREAD_LIMIT}x: {', '.join(wide)})")
        return found

    @property
    def provisional(self) -> bool:
        return bool(self.problems())

    def due(self, now: float) -> bool:
        """Whether a launch at `now` measures again."""
        if now - self.checked_at < RETRY_SEC:
            return False
        return self.provisional or now - self.measured_at >= MAX_AGE_SEC

    def describe(self, now: float, refresh: bool = True) -> str:
        """For the Plan: how much to trust the figure (`refresh` False: this launch measures nothing again)."""
        text = f"median of {self.rounds} interleaved samples" if self.rounds > 1 else "one sample"
        text += f", measured {age_text(now - self.measured_at)} ago" if self.measured_at else ", of unknown age"
        if self.problems() and not refresh:
            text += f"; provisional ({'; '.join(self.problems())}): not measured again (train.remeasure_matmul=false)"
        elif self.problems():
            text += f"; provisional ({'; '.join(self.problems())}): measured again by a launch from "
            text += f"{age_text(max(self.checked_at + RETRY_SEC - now, 0))} on"
        return text

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data) -> Measurement | None:
        """A cache entry; a figure cached before rounds existed (a flat dict of rates) is one sample of unknown
        age."""
        if not isinstance(data, dict) or not data:
            return None
        if "rates" not in data:
            return cls(rates={k: float(v) for k, v in data.items()})
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def age_text(seconds: float) -> str:
    """`2 h`, `3 d`: how long ago, for the Plan."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


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
    found = measurement()
    return dict(found.rates) if found else {}


def cached_measurement(now: Callable[[], float] = time.time, refresh: bool = True) -> Measurement | None:
    """This machine's cached figure when it is not due, without measuring (None: `measurement` would measure).
    `refresh` False: the cached figure whatever its age (train.remeasure_matmul=false)."""
    cached = Measurement.from_json(_read(cache_file()).get(machine_key()))
    return cached if cached is not None and not (refresh and cached.due(now())) else None


def measurement(now: Callable[[], float] = time.time, refresh: bool = True) -> Measurement | None:
    """This machine's figure: the cached one, unless it is due (`Measurement.due`), then measured again in a
    child process. A measurement that fails keeps the cached figure; a provisional one does not replace a sound
    one (it is tried again after RETRY_SEC). `refresh` False: never measured here, the cached figure whatever its
    age, else None (train.remeasure_matmul=false: auto decides by the CPU's flags)."""
    path, key = cache_file(), machine_key()
    cached = Measurement.from_json(_read(path).get(key))
    if not refresh:
        return cached
    if cached is not None and not cached.due(now()):
        return cached
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another launch may be measuring: wait for its result
            cached = Measurement.from_json(_read(path).get(key))
            if cached is not None and not cached.due(now()):
                return cached
            fresh = _measure_in_child()
            stamp = now()
            if fresh is None:
                return cached
            fresh = Measurement(**{**fresh.to_json(), "measured_at": stamp, "checked_at": stamp})
            kept = fresh
            if cached is not None and not cached.provisional and fresh.provisional:
                kept = Measurement(**{**cached.to_json(), "checked_at": stamp})  # the sound one stays
            _write(path, {**_read(path), key: kept.to_json()})
            return kept
    except OSError:
        return _measure_in_child()


def _measure_in_child() -> Measurement | None:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "launcher.plan.hardware"],
            capture_output=True,
            text=True,
            timeout=MEASURE_TIMEOUT_SEC,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
        return Measurement.from_json(json.loads(done.stdout.strip().splitlines()[-1]))
    except (subprocess.SubprocessError, OSError, ValueError, IndexError, AttributeError, TypeError):
        return None


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
    return {backend: _matmul(dtype, size, backend == "xla")(seconds) for backend in BACKENDS}


def _matmul(dtype: str, size: int, jit_compile: bool) -> Callable[[float], float]:
    """A compiled, warmed size^3 matmul; calling it with a duration gives its FLOP/s over that long."""
    import tensorflow as tf

    device = "/cpu:0" if not tf.config.list_logical_devices("GPU") else "/gpu:0"
    with tf.device(device):
        a = tf.cast(tf.random.normal((size, size)), dtype)
        b = tf.cast(tf.random.normal((size, size)), dtype)
        matmul = tf.function(lambda a, b: tf.matmul(a, b), jit_compile=jit_compile)
        matmul(a, b).numpy()

    def rate(seconds: float) -> float:
        with tf.device(device):
            count, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                result = matmul(a, b)
                count += 1
            result.numpy()
            elapsed = time.perf_counter() - start
        return 2.0 * size**3 * count / elapsed

    return rate


def cpu_snapshot() -> tuple[float, float, float] | None:
    """(wall clock, CPU seconds every process used, CPU seconds this process and its children used), or None
    where /proc/stat is not readable."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in (fields + ["0"] * 8)[:8])
    busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    own = os.times()
    return time.monotonic(), busy, own.user + own.system + own.children_user + own.children_system


def others_share(before, after) -> float | None:
    """The share of the machine's CPU that other processes used between two snapshots."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    others = (after[1] - before[1]) - (after[2] - before[2])
    return min(max(others / ((after[0] - before[0]) * (os.cpu_count() or 1)), 0.0), 1.0)


def measure_all(rounds: int = ROUNDS, seconds: float = 0.3, begun: Path | None = None) -> dict:
    """Every dtype and backend, `rounds` times interleaved (a busy spell falls on every rate, not on one), with
    the share of the CPU other processes used meanwhile. `begun`: a file created as the timed rounds begin."""
    matmuls = {f"{d}_{b}": _matmul(d, 2048, b == "xla") for d in DTYPES for b in BACKENDS}
    samples: dict[str, list[float]] = {key: [] for key in matmuls}
    if begun is not None:
        begun.touch()
    before = cpu_snapshot()
    for _ in range(rounds):
        for key, rate in matmuls.items():
            samples[key].append(rate(seconds) / 1e9)
    busy = others_share(before, cpu_snapshot())
    return {
        "rates": {key: round(statistics.median(found), 1) for key, found in samples.items()},
        "spread": {key: [round(min(found), 1), round(max(found), 1)] for key, found in samples.items()},
        "rounds": rounds,
        "busy": None if busy is None or math.isnan(busy) else round(busy, 3),
    }


if __name__ == "__main__":
    begun = os.environ.get(ROUNDS_BEGUN_ENV)
    print(json.dumps(measure_all(begun=Path(begun) if begun else None)))
