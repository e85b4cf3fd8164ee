"""Pruning's saving, side by side: the same 12-trial search (TPE, seed 0, learning rate log-uniform in [1e-3, 10]
for Adam on digits: half the space hopeless) with the median pruner and without, in the same run.

Each trial trains `--epochs` (default 20) epochs of a [256, 128] MLP: long enough that training, not the ~5 s
start of each trial's process, is most of a trial's time (with 4 epochs pruning saved 31 % of the steps and no
wall time). Prints one row per search (training steps run, wall time, pruned trials, best val_accuracy and its learning
rate), the ratios pruned/unpruned, and writes JSON to outputs/benchmarks-pruning.json. The two searches run one
after the other, the order alternating over `--repeats`, so a busy spell of the machine does not fall on one.

    python benchmarks/pruning.py --repeats 2 [--epochs 20]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SEARCH = {
    "defaults": [{"override /hydra/sweeper": "search"}],
    "objective": "val_accuracy",
    "hydra": {
        "sweeper": {
            "n_trials": 12,
            "n_jobs": 2,
            "sampler": {"name": "tpe", "seed": 0},
            "params": {"optimizer.learning_rate": {"low": 1.0e-3, "high": 10.0, "log": True}},
        }
    },
}
RUN = [
    "model.hidden_units=[32]",
    "train.epochs=4",
    "scaling.batch_size=64",
    "xla=false",
    "tracking.system_metrics=false",
]
PRUNERS = {"median": {"name": "median", "n_startup_trials": 3, "n_warmup_steps": 0}, "none": {"name": "none"}}


def search(pruner: str, folder: Path, epochs: int) -> dict:
    import optuna

    conf = folder / "conf" / "hparams_search"
    conf.mkdir(parents=True)
    body = json.loads(json.dumps(SEARCH))
    body["hydra"]["sweeper"]["pruner"] = PRUNERS[pruner]
    (conf / "bench.yaml").write_text("# @package _global_\n" + yaml.safe_dump(body, sort_keys=False))
    command = [
        sys.executable,
        "-m",
        "launcher",
        "-m",
        f"hydra.searchpath=[file://{folder / 'conf'}]",
        "hparams_search=bench",
        "hydra/launcher=parallel",
        f"hydra.sweep.dir={folder}/sweep",
        f"tracking.uri=sqlite:///{folder}/mlflow.db",
        *RUN,
        f"train.epochs={epochs}",
    ]
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    study = optuna.load_study(study_name="launcher", storage=f"sqlite:///{folder}/sweep/optuna.db")
    steps = 0
    for job in (folder / "sweep").glob("*/plan.yaml"):
        decisions = yaml.safe_load(job.read_text())["decisions"]
        epochs_run = len(json.loads((job.parent / "outcome.json").read_text())["history"])  # pruned at an epoch end
        steps += decisions["train.steps_per_epoch"]["value"] * epochs_run
    best = study.best_trial
    return {
        "pruner": pruner,
        "steps": steps,
        "wall_s": round(wall, 1),
        "pruned": sum(t.state.name == "PRUNED" for t in study.trials),
        "best_val_accuracy": round(best.value, 4),
        "best_learning_rate": best.params["optimizer.learning_rate"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    flags = Path("/proc/cpuinfo").read_text()
    cpu = next((line.split(":", 1)[1].strip() for line in flags.splitlines() if line.startswith("model name")), "?")
    kind = "AMX" if "amx_bf16" in flags else "AVX-512 BF16, no AMX" if "avx512_bf16" in flags else "no bf16"
    rows: dict[str, list[dict]] = {"median": [], "none": []}
    for repeat in range(args.repeats):
        order = ["median", "none"] if repeat % 2 == 0 else ["none", "median"]
        for pruner in order:
            with tempfile.TemporaryDirectory() as folder:
                rows[pruner].append(search(pruner, Path(folder), args.epochs))
    shape = f"12 trials, 2 at a time, {args.epochs} epochs of 23 steps"
    print(f"CPU: {cpu} ({kind}), Python {platform.python_version()}; {shape}")
    print(f"{'pruner':8} {'steps':>6} {'wall s':>8} {'pruned':>7} {'best val_acc':>13} {'best lr':>9}")
    for pruner, found in rows.items():
        for row in found:
            print(
                f"{pruner:8} {row['steps']:6d} {row['wall_s']:8.1f} {row['pruned']:7d} "
                f"{row['best_val_accuracy']:13.4f} {row['best_learning_rate']:9.4f}"
            )
    ratio_steps = statistics.median(r["steps"] for r in rows["median"]) / statistics.median(
        r["steps"] for r in rows["none"]
    )
    ratio_wall = statistics.median(r["wall_s"] for r in rows["median"]) / statistics.median(
        r["wall_s"] for r in rows["none"]
    )
    print(f"pruned / unpruned: steps {ratio_steps:.2f}x, wall time {ratio_wall:.2f}x (medians)")
    out = ROOT / "outputs" / "benchmarks-pruning.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "cpu": cpu,
        "kind": kind,
        "epochs": args.epochs,
        "rows": rows,
        "steps_ratio": ratio_steps,
        "wall_ratio": ratio_wall,
    }
    out.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
