"""What this machine offers, as plain data, probed without starting the TF runtime.

The resolver only ever sees an `Environment`, so its rules are tested with fake
ones (an A100 node, a CPU without AMX...). Probing must leave TensorFlow's
runtime uninitialised: logical CPU devices are configured afterwards.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import time
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from launcher.console import quiet_stderr
from launcher.plan.hardware import best_rate, cached_measurement, measurement


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: tuple[int, int]


# bfloat16 must beat float32 by this much to be worth its rounding (measured ratios: 0.55x, 1.9x, ~4x).
FAST_BF16_RATIO = 1.3


@dataclass(frozen=True)
class TunedStep:
    """What step timing chose (`launcher.launch.tuning`): the precision, XLA setting, update kind and steps per call of
    the fastest candidate, and the table it was chosen from, as the Plan quotes it."""

    precision: str
    xla: bool
    table: str
    update: str | None = None  # None: as optimizer.update decides
    steps_per_execution: int | None = None  # None: train.steps_per_execution
    layer_swaps: str | None = None  # "off": the model ran faster as stock Keras; None: as model.layer_swaps decides


@dataclass(frozen=True)
class Environment:
    cpu_count: int = 1
    cpu_flags: frozenset[str] = field(default_factory=frozenset)
    gpus: tuple[Gpu, ...] = ()
    tf_version: str = "unknown"
    keras_version: str = "unknown"
    tf_config: dict | None = None
    slurm: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    """The SLURM_* environment variables (empty outside a Slurm job)."""
    machine: str = ""
    matmul_gflops: dict[str, float] = field(default_factory=dict, compare=False, hash=False)
    """Measured matmul rates, "<dtype>_<backend>" -> GFLOP/s ({} when not measured); see plan.hardware."""
    matmul_trust: str = field(default="", compare=False, hash=False)
    """How far the rates can be trusted: samples, age, and why they are provisional (`Measurement.describe`)."""
    tuned: TunedStep | None = field(default=None, compare=False, hash=False)
    """The step `tune=auto` timed fastest on this model and machine (None: not tuned); auto decides by it."""

    def matmul_rate(self, dtype: str, backend: str) -> float | None:
        return self.matmul_gflops.get(f"{dtype}_{backend}")

    @property
    def has_amx(self) -> bool:
        return any(flag.startswith("amx") for flag in self.cpu_flags)

    @property
    def has_avx512_bf16(self) -> bool:
        return "avx512_bf16" in self.cpu_flags

    @property
    def cpu_has_fast_bf16(self) -> bool:
        """bfloat16 matmuls clearly faster than float32: measured when rates are known, else AMX.

        Flags alone mislead: with AVX-512 BF16 and no AMX a 2-core Xeon ran a 2048^3
        bfloat16 matmul at 0.55x float32, an AMD EPYC at 1.9x.
        """
        bf16, fp32 = self.best_matmul_rate("bfloat16"), self.best_matmul_rate("float32")
        if bf16 and fp32:
            return bf16 >= FAST_BF16_RATIO * fp32
        return self.has_amx

    def best_matmul_rate(self, dtype: str) -> float | None:
        return best_rate(self.matmul_gflops, dtype)

    @property
    def gpu_min_capability(self) -> tuple[int, int] | None:
        return min((g.compute_capability for g in self.gpus), default=None)

    def describe_devices(self) -> str:
        if self.gpus:
            names = ", ".join(f"{g.name} (cc {g.compute_capability[0]}.{g.compute_capability[1]})" for g in self.gpus)
            return f"{len(self.gpus)} GPU(s): {names}"
        cpu = "AMX" if self.has_amx else ("AVX-512 BF16, no AMX" if self.has_avx512_bf16 else "no AVX-512 BF16")
        return f"no GPU; 1 CPU with {self.cpu_count} cores ({cpu})"


def read_cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def read_tf_config() -> dict | None:
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return {"_invalid": raw}


def read_slurm() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key.startswith("SLURM_")}


def _probe_gpus() -> tuple[Gpu, ...]:
    import tensorflow as tf

    gpus = []
    # list_physical_devices does not create the TF context, so logical devices
    # can still be configured afterwards.
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        capability = tuple(details.get("compute_capability") or (0, 0))
        gpus.append(Gpu(details.get("device_name", device.name), capability))
    return tuple(gpus)


# Device nodes of the accelerators TensorFlow could find on Linux, and the packages that plug other devices into
# it: where neither exists, the machine is its CPUs alone and the resolver can see it without importing TensorFlow.
ACCELERATOR_NODES = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg", "/dev/accel*", "/dev/dri/renderD*")
DEVICE_PLUGINS = ("tensorflow-metal", "tensorflow-directml-plugin", "intel-extension-for-tensorflow", "tensorflow-rocm")


def probe_without_tensorflow(measure: bool, refresh: bool = True) -> Environment | None:
    """The machine as `probe` sees it, without importing TensorFlow, where that is exact: no accelerator device
    node, and (`measure`) a cached matmul figure that is not due (`refresh` False: of any age, or none). None
    otherwise."""
    if platform.system() != "Linux" or any(glob.glob(pattern) for pattern in ACCELERATOR_NODES):
        return None
    if any(_installed(name) for name in DEVICE_PLUGINS):
        return None
    measured = cached_measurement(refresh=refresh) if measure else None
    if measure and refresh and measured is None:
        return None
    try:
        versions = version("tensorflow"), version("keras")
    except PackageNotFoundError:
        return None
    return _environment((), *versions, measured, refresh)


def _installed(distribution: str) -> bool:
    try:
        version(distribution)
    except PackageNotFoundError:
        return False
    return True


def probe(measure: bool = False, refresh: bool = True) -> Environment:
    """What this machine offers; `measure` adds its matmul rates (cached; a child process the first time and when
    the figure is due, unless `refresh` is False: then the cached figure or none)."""
    import keras
    import tensorflow as tf

    with quiet_stderr():
        gpus = _probe_gpus()
    measured = measurement(refresh=refresh) if measure and not gpus else None
    return _environment(gpus, tf.__version__, keras.version(), measured, refresh)


def _environment(gpus: tuple[Gpu, ...], tf_version: str, keras_version: str, measured, refresh: bool) -> Environment:
    """The Environment both probes describe: the devices and versions they found, the rest read here."""
    return Environment(
        cpu_count=os.cpu_count() or 1,
        cpu_flags=read_cpu_flags(),
        gpus=gpus,
        tf_version=tf_version,
        keras_version=keras_version,
        tf_config=read_tf_config(),
        slurm=read_slurm(),
        machine=platform.machine(),
        matmul_gflops=dict(measured.rates) if measured else {},
        matmul_trust=measured.describe(time.time(), refresh) if measured else "",
    )
