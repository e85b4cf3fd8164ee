"""What the forkserver saves a sweep, side by side: the same sweep of `--jobs` tiny jobs (one epoch of the digits
MLP each, so start-up is most of a job) with the jobs forked by the launcher's forkserver and with every job a new
interpreter (`LAUNCHER_FORKSERVER=off`), in the same run. The two alternate over `--repeats`, so a busy spell of the
machine does not fall on one.

Prints each sweep's wall time and CPU time (the sweep's process and everything it waited for), the medians and the
ratios forked / new interpreter, and writes JSON to outputs/benchmarks-sweep-start.json.

    python benchmarks/sweep_start.py --repeats 3 [--jobs 4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from ab import interleaved, summary  # noqa: E402


def sweep(folder: Path, jobs: int, forked: bool) -> dict:
    """One sweep in `folder`; its wall and CPU seconds and whether its jobs were forked."""
    values = ",".join(str(0.001 * (i + 1)) for i in range(jobs))
    args = [
        sys.executable,
        "-m",
        "launcher",
        "-m",
        "model.hidden_units=[32]",
        "train.epochs=1",
        "scaling.batch_size=32",
        f"optimizer.learning_rate={values}",
        f"tracking.uri=sqlite:///{folder}/mlflow.db",
        f"hydra.sweep.dir={folder}/multirun",
    ]
    env = {k: v for k, v in os.environ.items() if k != "LAUNCHER_FORKSERVER"}
    if not forked:
        env["LAUNCHER_FORKSERVER"] = "off"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"the sweep failed:\n{done.stderr[-3000:]}")
    outcomes = [json.loads(p.read_text()) for p in sorted((folder / "multirun").glob("*/outcome.json"))]
    assert len(outcomes) == jobs, f"{len(outcomes)} of {jobs} jobs wrote an outcome"
    was_forked = all(o.get("forked_by") is not None for o in outcomes)
    assert was_forked is forked, f"jobs forked: {was_forked}, asked: {forked}"
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=4)
    options = parser.parse_args()
    kinds = ("forked", "cold")
    rows = interleaved(
        options.repeats, kinds, lambda folder, kind: sweep(folder, options.jobs, kind == "forked"), "sweep-start-"
    )
    result = summary(rows, kinds, ("wall_s", "cpu_s"))
    out = ROOT / "outputs" / "benchmarks-sweep-start.json"
    out.parent.mkdir(exist_ok=True)
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    out.write_text(json.dumps({"machine": machine, "jobs": options.jobs, "rows": rows, "summary": result}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
