"""What the task's Keras metric objects cost per step: this checkout vs an earlier commit, interleaved.

    .venv/bin/python benchmarks/metrics_cost.py                        # vs 1896c55 (accuracy counted in the
                                                                       # step's stats tensor), 3 repetitions
    .venv/bin/python benchmarks/metrics_cost.py --baseline <commit> --reps 5
    .venv/bin/python benchmarks/metrics_cost.py --baseline <commit> --reps 6 --epochs 10 --configs "mlp fp32 default"

Each measurement is a fresh `python -m launcher` subprocess with the same overrides; the baseline runs from a
git worktree of the given commit (its own launcher, models and datasets packages first on the path). Prints
examples/s (median over repetitions of the median of epochs 2..N) and the ratio this / baseline per config.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMON = ["tracking.enabled=false", "checkpoint.enabled=false", "train.epochs=5", "train.measure_utilization=false"]
CONFIGS = {
    "mlp fp32 default": ["precision=fp32", "xla=false"],
    "mlp fp32 xla": ["precision=fp32", "xla=true"],
    "mlp mixed mirrored xla": ["precision=mixed", "strategy=mirrored", "xla=true"],
}


def throughput(tree: Path, overrides: list[str], pythonpath: str, run_dir: Path) -> float:
    env = {**os.environ, "PYTHONPATH": pythonpath, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-m", "launcher", *COMMON, *overrides, f"hydra.run.dir={run_dir}"],
        cwd=tree,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    if done.returncode:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    history = json.loads((run_dir / "outcome.json").read_text())["history"]
    return statistics.median(epoch["examples_per_sec"] for epoch in history[1:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default="1896c55")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=5, help="epochs per run (the first, compiling one excluded)")
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    args = parser.parse_args()
    COMMON[COMMON.index("train.epochs=5")] = f"train.epochs={args.epochs}"
    configs = {name: CONFIGS[name] for name in args.configs}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = tmp / "baseline"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(base), args.baseline], cwd=ROOT, check=True, capture_output=True
        )
        try:
            paths = {}
            for name, tree in (("this", ROOT), ("baseline", base)):
                shim = tmp / f"path-{name}"
                shim.mkdir()
                (shim / "launcher_models").symlink_to(tree / "models")
                (shim / "launcher_datasets").symlink_to(tree / "datasets")
                paths[name] = f"{tree}:{shim}"
            results: dict[str, dict[str, list[float]]] = {c: {"this": [], "baseline": []} for c in configs}
            runs = itertools.count()
            for rep in range(args.reps):
                for config, overrides in configs.items():
                    for name, tree in (
                        (("baseline", base), ("this", ROOT)) if rep % 2 else (("this", ROOT), ("baseline", base))
                    ):
                        value = throughput(tree, overrides, paths[name], tmp / f"run-{next(runs)}")
                        results[config][name].append(value)
                        print(f"  rep {rep + 1} {config:<24} {name:<8} {value:10.0f} examples/s", flush=True)
            print(f"\n{'config':<24} {'this':>10} {'baseline':>10} {'ratio':>7}   (examples/s, median of {args.reps})")
            for config, pair in results.items():
                this, baseline = statistics.median(pair["this"]), statistics.median(pair["baseline"])
                spread = f"this {min(pair['this']):.0f}-{max(pair['this']):.0f}, "
                spread += f"baseline {min(pair['baseline']):.0f}-{max(pair['baseline']):.0f}"
                print(f"{config:<24} {this:10.0f} {baseline:10.0f} {this / baseline:7.3f}   ({spread})")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, capture_output=True)


if __name__ == "__main__":
    main()
