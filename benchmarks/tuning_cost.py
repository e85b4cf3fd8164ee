"""What `tune=auto` costs a first launch: this checkout's timing against an earlier commit's, interleaved.

    .venv/bin/python benchmarks/tuning_cost.py                          # vs 1047599, mlp cnn lm, 3 repetitions
    .venv/bin/python benchmarks/tuning_cost.py --workloads lm --reps 5 --baseline <commit>

Per workload of `benchmarks/run.py` (the 3x2048 MLP, the CNN, the transformer LM), each side runs a fresh
`python -m launcher ... precision=auto xla=auto tune=force train.max_steps=2` with its own empty tuning cache (the
matmul rates measured once, before, and copied in: only the step timing is measured). The baseline runs from a git
worktree of the given commit (its own launcher, models and datasets first on the path). The sides alternate per
repetition (`ab.interleaved`). Prints per workload the tuning seconds each side's cache recorded (median, min,
max), their ratio, and each side's choices, so a faster timing that chooses differently shows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ab import interleaved, summary  # noqa: E402
from workloads import launcher_overrides  # noqa: E402
from worktree import KINDS, launch, this_and_baseline  # noqa: E402


def tuned(tree: Path, pythonpath: str, workload: str, folder: Path, rates: Path) -> dict:
    """One first launch of `workload` from `tree` with an empty tuning cache: its timing's seconds and choice."""
    cache = folder / "cache"
    cache.mkdir()
    shutil.copy(rates, cache / rates.name)
    overrides = [
        *launcher_overrides(workload),
        *("precision=auto", "xla=auto", "tune=force", "train.max_steps=2", "tracking.enabled=false"),
        *("checkpoint=off", "checkpoint.export_model=false", f"hydra.run.dir={folder / 'run'}"),
    ]
    launch(tree, pythonpath, cache, overrides)
    (entry,) = json.loads((cache / "step_tuning.json").read_text()).values()
    choice = entry["choice"]
    step = "xla" if choice["xla"] else ("hybrid" if choice["update"] == "fused" else "graph")
    return {"seconds": entry["seconds"], "choice": f"{choice['precision']} {step}", "rows": len(entry["table"])}


def matmul_rates(folder: Path) -> Path:
    """The matmul rates both sides read (measured once here, so neither side's launch pays the probe)."""
    from launcher.plan.hardware import cache_file, measured_rates

    os.environ["LAUNCHER_CACHE"] = str(folder)
    measured_rates()
    return cache_file()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default="1047599")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workloads", nargs="*", default=["mlp", "cnn", "lm"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tuning-cost-") as scratch:
        tmp = Path(scratch)
        with this_and_baseline(args.baseline, tmp) as (trees, paths):
            (tmp / "rates").mkdir()
            rates = matmul_rates(tmp / "rates")
            results = {}
            for workload in args.workloads:
                print(f"\n{workload}", flush=True)
                rows = interleaved(
                    args.reps,
                    KINDS,
                    lambda folder, kind, w=workload: tuned(trees[kind], paths[kind], w, folder, rates),
                    prefix=f"tuning-{workload}-",
                )
                results[workload] = summary(rows, KINDS, ("seconds",))
                for kind in KINDS:
                    print(f"  {kind} chose: {', '.join(r['choice'] for r in rows if r['kind'] == kind)}")
    print("\nworkload   this s (min-max)        baseline s (min-max)    this / baseline")
    for workload, result in results.items():
        this, baseline = result["this"]["seconds"], result["baseline"]["seconds"]
        print(
            f"{workload:<10} {this['median']:5.1f} ({this['min']:.1f}-{this['max']:.1f})"
            f"        {baseline['median']:5.1f} ({baseline['min']:.1f}-{baseline['max']:.1f})"
            f"        {result['seconds_ratio']:.2f}"
        )


if __name__ == "__main__":
    main()
