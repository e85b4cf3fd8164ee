"""What several sweepers on one shared study do to a search's trials per hour, side by side: the same search (`--trials`
trials of the digits MLP, `--epochs` epochs each, one trial at a time per sweeper) pulled by `--sweepers` sweepers
started together on one journal-file study, and by one sweeper alone on the same kind of study, in the same run.
The two alternate over `--repeats`, so a busy spell of the machine does not fall on one.

Prints each search's wall time, CPU time (the sweepers and everything they waited for) and trials per hour, the
medians, ranges and the ratios several / one, and writes JSON to outputs/benchmarks-shared-search.json. On a machine
of few cores the sweepers' trials compete for them: the ratio says how much of the machine one sweeper leaves idle.

    python benchmarks/shared_search.py --repeats 3 [--sweepers 2 --trials 6 --epochs 3]
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

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from ab import interleaved, summary  # noqa: E402


def _search(folder: Path, trials: int) -> Path:
    conf = folder / "conf" / "hparams_search"
    conf.mkdir(parents=True)
    body = {
        "defaults": [{"override /hydra/sweeper": "search"}],
        "objective": "val_accuracy",
        "hydra": {
            "sweeper": {
                "n_trials": trials,
                "params": {"optimizer.learning_rate": {"low": 1.0e-3, "high": 0.1, "log": True}},
            }
        },
    }
    (conf / "bench.yaml").write_text("# @package _global_\n" + yaml.safe_dump(body, sort_keys=False))
    return folder / "conf"


def search(folder: Path, sweepers: int, trials: int, epochs: int) -> dict:
    """One search pulled by `sweepers` sweepers in `folder`; its wall and CPU seconds and trials per hour."""
    conf = _search(folder, trials)
    storage = f"journal://{folder}/study.log"

    def command(index: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "launcher",
            "-m",
            f"hydra.searchpath=[file://{conf}]",
            "hparams_search=bench",
            f"hydra.sweeper.storage={storage}",
            f"hydra.sweep.dir={folder}/sweep{index}",
            f"tracking.uri=sqlite:///{folder}/mlflow.db",
            "model.hidden_units=[32]",
            f"train.epochs={epochs}",
            "xla=false",
            "tracking.system_metrics=false",
            "checkpoint.export_model=false",
            "tracking.log_model=false",
        ]

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    processes = [
        subprocess.Popen(command(i), cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for i in range(sweepers)
    ]
    errors = [p.communicate()[1] for p in processes]
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    for process, error in zip(processes, errors, strict=True):
        if process.returncode != 0:
            raise SystemExit(f"a sweeper failed:\n{error[-3000:]}")
    ran = len(list(folder.glob("sweep*/*/outcome.json")))
    assert ran == trials, f"{ran} trials ran, {trials} asked"
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "trials_per_hour": round(trials / wall * 3600, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sweepers", type=int, default=2)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=3)
    options = parser.parse_args()
    kinds = (f"{options.sweepers}-sweepers", "1-sweeper")

    def sample(folder: Path, kind: str) -> dict:
        count = options.sweepers if kind == kinds[0] else 1
        return search(folder, count, options.trials, options.epochs)

    rows = interleaved(options.repeats, kinds, sample, "shared-search-")
    result = summary(rows, kinds, ("wall_s", "cpu_s", "trials_per_hour"))
    out = ROOT / "outputs" / "benchmarks-shared-search.json"
    out.parent.mkdir(exist_ok=True)
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    record = {"machine": machine, "options": vars(options), "rows": rows, "summary": result}
    out.write_text(json.dumps(record, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
