"""What observing a run costs the step loop, side by side: MLflow tracking, and the numerics telemetry.

    .venv/bin/python benchmarks/tracking_cost.py                        # tracking: 3 repetitions per workload
    .venv/bin/python benchmarks/tracking_cost.py --compare telemetry    # device-side numerics counters
    .venv/bin/python benchmarks/tracking_cost.py --reps 5 --workloads digits

Each run is a fresh `python -m launcher` logging to a SQLite store in a temporary dir, alternating
the baseline and the measured variant:

- tracking:  epoch metrics only (tracking.step_metrics_every=0, tracking.system_metrics=false) vs the
             defaults (step metrics every 32 steps, system metrics on);
- telemetry: train.telemetry=false (no gradient norm, no per-step trace) vs true, tracking as in the
             baseline above so only the compiled step differs; precision=mixed so the loss scale is read
             (telemetry_fp32: the same in float32, whose faster steps make the same work relatively dearer).

Prints the median examples/s of each (epochs after the first) and their ratio: the cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import run_child  # noqa: E402
from workloads import launcher_overrides  # noqa: E402

# digits: the default job's tiny MLP (sub-millisecond steps, the worst case for a per-step cost);
# small: a 256x256 MLP on batches of 256.
WORKLOADS = {
    "digits": ["model.hidden_units=[128,64]", "scaling.batch_size=32"],
    "small": launcher_overrides("small"),
}
EPOCH_ONLY = ["tracking.step_metrics_every=0", "tracking.system_metrics=false"]
COMPARISONS = {
    "tracking": {
        "epoch metrics only": EPOCH_ONLY,
        "defaults (step + system metrics)": [],
    },
    "telemetry": {
        "telemetry off": [*EPOCH_ONLY, "precision=mixed", "train.telemetry=false"],
        "telemetry on": [*EPOCH_ONLY, "precision=mixed", "train.telemetry=true"],
    },
    # float32 steps are several times faster on CPUs without a float16 path: the relative worst case.
    "telemetry_fp32": {
        "telemetry off": [*EPOCH_ONLY, "precision=fp32", "train.telemetry=false"],
        "telemetry on": [*EPOCH_ONLY, "precision=fp32", "train.telemetry=true"],
    },
}


def measure(workload: str, extra: list[str], epochs: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            sys.executable,
            str(HERE / "rss.py"),
            sys.executable,
            "-m",
            "launcher",
            *WORKLOADS[workload],
            *extra,
            f"train.epochs={epochs}",
            "checkpoint=off",
            "checkpoint.export_model=false",
            "xla=false",
            f"tracking.uri=sqlite:///{tmp}/mlflow.db",
            f"hydra.run.dir={tmp}/run",
        ]
        run_child(args)
        history = json.loads((Path(tmp) / "run" / "outcome.json").read_text())["history"]
    return statistics.median(h["examples_per_sec"] for h in history[1:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    parser.add_argument("--compare", choices=list(COMPARISONS), default="tracking")
    args = parser.parse_args()
    variants = COMPARISONS[args.compare]
    flags = Path("/proc/cpuinfo").read_text()
    cpu = next((line.split(":", 1)[1].strip() for line in flags.splitlines() if line.startswith("model name")), "?")
    print(f"CPU: {cpu}; AMX: {'amx_bf16' in flags}; AVX-512 BF16: {'avx512_bf16' in flags}")
    results = {}
    for workload in args.workloads:
        rates: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.reps):  # interleaved, so a busy moment on the machine hits both
            for name, extra in variants.items():
                rates[name].append(measure(workload, extra, args.epochs))
        medians = {name: statistics.median(values) for name, values in rates.items()}
        base, tracked = medians.values()
        results[workload] = {**medians, "ratio": tracked / base}
        print(
            f"{workload}: "
            + ", ".join(f"{name} {value:,.0f} ex/s" for name, value in medians.items())
            + f"; ratio {tracked / base:.3f} (cost {100 * (1 - tracked / base):+.1f}%)",
            flush=True,
        )
    out = HERE.parent / "outputs" / f"{args.compare}_cost.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
