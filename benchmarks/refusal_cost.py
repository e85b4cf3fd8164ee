"""What a refusal costs: CPU seconds of `python -m launcher <a config the rules refuse>` from a new interpreter, this
checkout against an earlier commit, interleaved (issue 62, item 9's goal: under 3 CPU-seconds on a 2-core CPU).

    .venv/bin/python benchmarks/refusal_cost.py --baseline 0f3224e --reps 5

Prints each side's CPU seconds (user + system of the launch and its children): median [min-max], and the ratio.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from worktree import this_and_baseline

REFUSED = ["precision=mixed", "loss_scale=none", "xla=false"]  # a rule's refusal: exit 2


def cpu_of(tree: Path, pythonpath: str, scratch: Path) -> float:
    """One refused launch's CPU seconds (it must exit 2)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": pythonpath, "LAUNCHER_CACHE": str(scratch / "cache")}
    args = [*REFUSED, f"hydra.run.dir={scratch}/run", f"tracking.uri=sqlite:///{scratch}/mlflow.db"]
    done = subprocess.run([sys.executable, "-m", "launcher", *args], cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 2:
        raise SystemExit(f"{tree}: expected exit 2, got {done.returncode}: {done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="the commit to compare with")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, this_and_baseline(args.baseline, Path(tmp)) as (trees, paths):
        seconds: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(args.reps):
            for name, tree in trees.items():  # interleaved: load on the machine falls on both sides alike
                seconds[name].append(cpu_of(tree, paths[name], Path(tmp)))
        for name, found in seconds.items():
            spread = f"[{min(found):.2f}-{max(found):.2f}]"
            print(f"{name:<9} {statistics.median(found):5.2f} CPU-s {spread} over {len(found)}")
        ratio = statistics.median(seconds["this"]) / statistics.median(seconds["baseline"])
        print(f"this / baseline: {ratio:.2f}x")


if __name__ == "__main__":
    main()
