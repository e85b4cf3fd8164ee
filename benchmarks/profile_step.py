"""Where a training step's time goes, per precision: the evidence behind the benchmark's misses.

    .venv/bin/python benchmarks/profile_step.py             # MLP: fp32, fp32+xla, bf16, bf16+hybrid, bf16+xla
    .venv/bin/python benchmarks/profile_step.py --configs "bf16 graph" --workload cnn

For each config, one launcher run with `train.profile.steps` (TensorFlow profiler trace) on the
benchmark workload; prints its op table, then each config's matmul/conv time per step against
the first config's (same FLOPs, so the ratio is the kernels' relative speed) and the MFU each would reach if every
other op took no time (the matmuls' ceiling, against this run's matmul peaks). Then, for float32
and bfloat16, the oneDNN matmul implementation this CPU gets (ONEDNN_VERBOSE): `avx512_core_amx`
kernels are the fast bfloat16 path; `avx512_core_bf16` converts and runs on the AVX-512 units.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from run import CONFIGS, flops_per_example, launcher_command, peaks  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

ONEDNN_PROBE = """
import tensorflow as tf
a = tf.cast(tf.random.normal((512, 512)), "{dtype}")
tf.function(lambda a: tf.matmul(a, a))(a).numpy()
"""


def profile_config(workload: str, name: str, steps: int) -> str:
    precision, xla, extra = CONFIGS[name]
    with tempfile.TemporaryDirectory() as tmp:
        args = launcher_command(
            workload,
            precision,
            xla,
            1,
            f"{tmp}/run",
            [
                *(o for o in extra if not o.startswith("train.steps_per_execution=")),
                "train.steps_per_execution=4",
                f"train.profile.steps={steps}",
                "train.profile.skip_steps=4",
            ],
        )
        done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{name}: {done.stderr[-2000:]}")
        return (Path(tmp) / "run" / "profile" / "top_ops.txt").read_text()


def matmul_ms(table: str) -> float | None:
    found = re.search(r"matmul/conv ([\d.]+) ms", table)
    return float(found.group(1)) if found else None


def onednn_impl(dtype: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", ONEDNN_PROBE.format(dtype=dtype)],
        capture_output=True,
        text=True,
        env={**os.environ, "ONEDNN_VERBOSE": "1", "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    # onednn_verbose,v1,primitive,exec,cpu,<primitive>,<implementation>,...
    fields = [line.split(",") for line in done.stdout.splitlines() if line.startswith("onednn_verbose")]
    kinds = {
        f"{f[5]} {f[6] or '(no ISA named)'}"
        for f in fields
        if len(f) > 6 and f[3] == "exec" and f[5] in ("matmul", "gemm_api")
    }
    return ", ".join(sorted(kinds)) or "no oneDNN matmul seen"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="mlp", choices=sorted(WORKLOADS))
    parser.add_argument(
        "--configs",
        nargs="+",
        default=["fp32 graph", "fp32 xla", "bf16 graph", "bf16 hybrid", "bf16 xla"],
        choices=sorted(CONFIGS),
    )
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    matmul = {}
    for name in args.configs:
        table = profile_config(args.workload, name, args.steps)
        matmul[name] = matmul_ms(table)
        print(f"\n=== {args.workload} {name}\n{table}", flush=True)
    base = matmul.get(args.configs[0])
    print(f"\nmatmul/conv op time per step (same FLOPs in every config), against {args.configs[0]}:")
    for name, ms in matmul.items():
        ratio = f"{ms / base:.2f}x" if ms and base else "n/a"
        print(f"  {name:<10}{ms if ms is not None else float('nan'):>9.1f} ms  {ratio}")
    print_matmul_ceiling(args.workload, matmul)
    for dtype in ("float32", "bfloat16"):
        print(f"oneDNN matmul implementation for {dtype}: {onednn_impl(dtype)}")


def print_matmul_ceiling(workload: str, matmul: dict) -> None:
    """What the matmuls alone allow: the rate they run at, and the MFU a step would reach if every other op took
    no time (the step's FLOPs over its matmul/conv op time, against this run's 2048^3 peak of the dtype). A goal
    above that ceiling needs faster matmuls at the model's own shapes, not less elementwise work."""
    flops = flops_per_example(workload) * WORKLOADS[workload]["batch"]
    peak = peaks()
    print(
        f"\nthe matmuls' ceiling ({flops / 1e9:.2f} GFLOP per step; 2048^3 peaks: "
        f"float32 {peak['float32'] / 1e9:.0f}, bfloat16 {peak['bfloat16'] / 1e9:.0f} GFLOP/s):"
    )
    for name, ms in matmul.items():
        if not ms:
            continue
        dtype = "bfloat16" if name.startswith("bf16") else "float32"
        rate = flops / (ms / 1000)
        print(f"  {name:<12} matmuls at {rate / 1e9:.0f} GFLOP/s: MFU <= {rate / peak[dtype]:.0%} of the {dtype} peak")


if __name__ == "__main__":
    main()
