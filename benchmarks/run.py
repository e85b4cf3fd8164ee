"""Launcher vs the hand-written `model.fit` script, side by side, interleaved, in one process tree.

    .venv/bin/python benchmarks/run.py                 # every workload and config, 3 repetitions
    .venv/bin/python benchmarks/run.py --quick         # 1 repetition, fewer configs

Each measurement is a fresh subprocess (launcher: `python -m launcher ...`; baseline:
benchmarks/baseline_fit.py), alternating launcher and baseline. Prints a table and writes
JSON (medians over repetitions; examples/s excludes the first, compiling epoch), with:
throughput ratio, model FLOPs utilisation against a matmul peak measured in this run,
time to first step, peak RSS, what MLflow tracking costs a run, replica-safe vs stock LSO. `model.fit` runs twice
per row: with the launcher's steps_per_execution (like for like: the `ratio` column) and as a person usually
writes it (steps_per_execution=1: `ratio_vs_script`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from workloads import WORKLOADS, launcher_overrides  # noqa: E402

# name -> (precision, xla, extra launcher overrides). "graph" rows keep Keras's update ops (the
# launcher before the hybrid step); "hybrid" rows update through fused kernels, as xla=false does now.
KERAS_UPDATE, FUSED_UPDATE = ["optimizer.update=keras"], ["optimizer.update=fused"]
CONFIGS = {
    "fp32": ("fp32", "false", KERAS_UPDATE),
    "fp32+hybrid": ("fp32", "false", FUSED_UPDATE),
    "fp32+xla": ("fp32", "true", []),
    "bf16": ("bf16", "false", KERAS_UPDATE),
    "bf16+hybrid": ("bf16", "false", FUSED_UPDATE),
    "bf16+xla": ("bf16", "true", []),
    "auto": ("auto", "auto", []),
    "mixed": ("mixed", "false", []),
}
PLAN = {
    "mlp": ["fp32", "fp32+hybrid", "fp32+xla", "bf16", "bf16+hybrid", "bf16+xla", "auto"],
    "cnn": ["fp32", "fp32+hybrid", "fp32+xla", "bf16", "bf16+hybrid", "bf16+xla", "auto"],
    "small": ["mixed"],
}
# The launcher's in-graph loop of steps; the like-for-like `model.fit` compiles the same (steps_per_execution).
STEPS_PER_EXECUTION = 16
QUICK = {
    "mlp": ["fp32", "fp32+hybrid", "bf16", "bf16+hybrid", "auto"],
    "cnn": ["fp32", "bf16+hybrid", "auto"],
    "small": ["mixed"],
}


def run_child(args: list[str], env=None) -> tuple[str, float]:
    """Run a subprocess (wrapped by rss.py, which reports its peak RSS on stderr)."""
    proc = subprocess.Popen(
        args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}
    )
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:6])}... failed: {err[-1500:]}")
    return out, err


def launcher_command(workload: str, precision: str, xla: str, epochs: int, run_dir: str, extra=()) -> list[str]:
    """`python -m launcher` on a workload, untracked, no checkpoints: only training is measured."""
    return [
        sys.executable,
        "-m",
        "launcher",
        *launcher_overrides(workload),
        f"precision={precision}",
        f"xla={xla}",
        f"train.epochs={epochs}",
        "checkpoint=off",
        "checkpoint.export_model=false",
        "tracking.enabled=false",
        f"train.steps_per_execution={STEPS_PER_EXECUTION}",
        f"hydra.run.dir={run_dir}",
        *extra,
    ]


def launcher_run(workload: str, precision: str, xla: str, epochs: int, extra=()) -> dict:
    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        args = [
            sys.executable,
            str(HERE / "rss.py"),
            *launcher_command(workload, precision, xla, epochs, f"{tmp}/run", extra),
        ]
        out, err = run_child(args)
        outcome = json.loads((Path(tmp) / "run" / "outcome.json").read_text())
        decisions = yaml.safe_load((Path(tmp) / "run" / "plan.yaml").read_text())["decisions"]
    history = outcome["history"]
    return {
        "chosen": f"{decisions['precision']['value']}, {decisions['step']['value']}",
        "examples_per_sec": statistics.median(h["examples_per_sec"] for h in history[1:]),
        "epoch_time_sec": statistics.median(h["epoch_time_sec"] for h in history[1:]),
        "time_to_first_step_sec": history[0].get("time_to_first_step_sec"),
        "peak_rss_mb": json.loads(err.strip().splitlines()[-1])["peak_rss_mb"],
    }


def baseline_run(workload: str, precision: str, xla: str, epochs: int, steps_per_execution: int = 1) -> dict:
    args = [
        sys.executable,
        str(HERE / "rss.py"),
        sys.executable,
        str(HERE / "baseline_fit.py"),
        f"--workload={workload}",
        f"--precision={precision}",
        f"--xla={xla}",
        f"--epochs={epochs}",
        f"--steps-per-execution={steps_per_execution}",
    ]
    out, err = run_child(args, env={"PYTHONPATH": str(HERE), "TF_CPP_MIN_LOG_LEVEL": "2"})
    data = json.loads(out.strip().splitlines()[-1])
    data["peak_rss_mb"] = json.loads(err.strip().splitlines()[-1])["peak_rss_mb"]
    data["examples_per_sec"] = statistics.median(data["examples_per_sec"][1:])
    return data


def peaks() -> dict:
    """Per dtype: the graph (oneDNN) and XLA matmul rates; the peak is the faster."""
    from launcher.plan.hardware import matmul_rates

    out = {}
    for dtype in ("float32", "bfloat16"):
        rates = matmul_rates(dtype, size=2048, seconds=2.0)
        out.update({f"{dtype}_{mode}": rate for mode, rate in rates.items()}, **{dtype: max(rates.values())})
    return out


def flops_per_example(workload: str) -> float:
    from launcher.run.utilization import training_flops_per_example

    return training_flops_per_example(WORKLOADS[workload]["keras_model"]())


def tracking_cost(workload: str, epochs: int, untracked: float) -> float:
    """A tracked run (the defaults: epoch and step metrics, system metrics, into a SQLite store) against the
    untracked row's median: the fraction of throughput tracking costs, the way a run pays it."""
    with tempfile.TemporaryDirectory() as tmp:
        same = CONFIGS["fp32"][2]  # the untracked fp32 row's own overrides, tracking switched on
        tracked = launcher_run(
            workload, "fp32", "false", epochs, [*same, "tracking.enabled=true", f"tracking.uri=sqlite:///{tmp}/m.db"]
        )
    return 1.0 - tracked["examples_per_sec"] / untracked


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=str(ROOT / "outputs" / "benchmarks.json"))
    args = parser.parse_args()
    plan = QUICK if args.quick else PLAN
    reps = 1 if args.quick else args.reps
    peak = peaks()
    print(
        "matmul rate (2048^3, this run), GFLOP/s: "
        + ", ".join(
            f"{dtype} graph {peak[dtype + '_graph'] / 1e9:.0f} / XLA {peak[dtype + '_xla'] / 1e9:.0f}"
            for dtype in ("float32", "bfloat16")
        )
        + "; the peak of a dtype is the faster",
        flush=True,
    )
    results = []
    for workload, configs in plan.items():
        flops = flops_per_example(workload)
        for name in configs:
            precision, xla, extra = CONFIGS[name]
            runs = {"launcher": [], "baseline": [], "script": []}
            script = ("fp32" if precision == "auto" else precision, "false" if xla == "auto" else xla, args.epochs)
            for _ in range(reps):  # interleaved: like for like, the launcher, the script as a person writes it
                runs["baseline"].append(baseline_run(workload, *script, steps_per_execution=STEPS_PER_EXECUTION))
                runs["launcher"].append(launcher_run(workload, precision, xla, args.epochs, extra))
                runs["script"].append(baseline_run(workload, *script))
            row = summarise(workload, name, runs, flops, peak)
            results.append(row)
            print(format_row(row), flush=True)
    extra = overheads(results, args.epochs)
    report = {"peak_flops": peak, "results": results, **extra}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(json.dumps(extra, indent=2))
    print(f"JSON written to {args.json}")


def summarise(workload, name, runs, flops, peak) -> dict:
    def median(side, key):
        values = [r[key] for r in runs[side] if r.get(key) is not None]
        return statistics.median(values) if values else None

    chosen = runs["launcher"][0]["chosen"]
    dtype = "bfloat16" if chosen.startswith("bf16") else "float32"
    script_dtype = "bfloat16" if name.startswith("bf16") else "float32"
    ours, theirs = median("launcher", "examples_per_sec"), median("baseline", "examples_per_sec")
    written = median("script", "examples_per_sec")
    return {
        "workload": workload,
        "config": name,
        "chosen": chosen,
        "launcher_examples_per_sec": ours,
        "baseline_examples_per_sec": theirs,
        "ratio": ours / theirs,  # like for like: model.fit with the same steps_per_execution
        "script_examples_per_sec": written,
        "ratio_vs_script": ours / written,  # the script as a person writes it (steps_per_execution=1)
        "launcher_mfu": ours * flops / peak[dtype],
        "baseline_mfu": theirs * flops / peak[script_dtype],
        "launcher_first_step_sec": median("launcher", "time_to_first_step_sec"),
        "baseline_first_step_sec": median("baseline", "time_to_first_step_sec"),
        "launcher_rss_mb": median("launcher", "peak_rss_mb"),
        "baseline_rss_mb": median("baseline", "peak_rss_mb"),
        "launcher_epoch_time_sec": median("launcher", "epoch_time_sec"),
        "launcher_runs": [r["examples_per_sec"] for r in runs["launcher"]],
        "baseline_runs": [r["examples_per_sec"] for r in runs["baseline"]],
        "script_runs": [r["examples_per_sec"] for r in runs["script"]],
    }


def format_row(r) -> str:
    return (
        f"{r['workload']:<6}{r['config']:<12} ({r['chosen']:<16}) "
        f"launcher {r['launcher_examples_per_sec']:>9.0f} ex/s  "
        f"fit {r['baseline_examples_per_sec']:>9.0f} ex/s  ratio {r['ratio']:.2f}  "
        f"(script {r['script_examples_per_sec']:>7.0f}: {r['ratio_vs_script']:.2f})  "
        f"MFU {r['launcher_mfu']:.0%} vs {r['baseline_mfu']:.0%}  "
        f"first step {r['launcher_first_step_sec']:.1f}s vs {r['baseline_first_step_sec']:.1f}s  "
        f"RSS {r['launcher_rss_mb']:.0f} vs {r['baseline_rss_mb']:.0f} MB"
    )


def overheads(results, epochs) -> dict:
    out = {}
    fp32 = [r for r in results if r["config"] == "fp32" and r["workload"] == "mlp"]
    if fp32:  # one tracked run: within this machine's run-to-run noise (+-5-10%) it says little on its own
        out["mlflow_tracking_cost_fraction"] = tracking_cost("mlp", epochs, fp32[0]["launcher_examples_per_sec"])
    stock = launcher_run("small", "mixed", "false", epochs, ["loss_scale.implementation=stock"])
    safe = launcher_run("small", "mixed", "false", epochs, ["loss_scale.implementation=replica_safe"])
    out["replica_safe_vs_stock_step_time"] = stock["examples_per_sec"] / safe["examples_per_sec"]
    auto = [r for r in results if r["config"] == "auto" and r["workload"] == "mlp"]
    # The fp32 script runs as the baseline of both the fp32 and the auto rows: pool them.
    script = [
        x for r in results if r["workload"] == "mlp" and r["config"] in ("fp32", "auto") for x in r["baseline_runs"]
    ]
    if auto and script:
        out["auto_vs_handwritten_fp32_mlp"] = auto[0]["launcher_examples_per_sec"] / statistics.median(script)
    # auto against stock model.fit with the precision auto chose (the bf16 script when auto chose bf16).
    chosen = auto[0]["chosen"].split(",")[0] if auto else None
    same = [
        x for r in results if r["workload"] == "mlp" and r["config"].split("+")[0] == chosen for x in r["baseline_runs"]
    ]
    if auto and same and chosen != "fp32":
        out[f"auto_vs_stock_fit_{chosen}_mlp"] = auto[0]["launcher_examples_per_sec"] / statistics.median(same)
    for workload in ("mlp", "cnn"):
        rows = {r["config"]: r["launcher_examples_per_sec"] for r in results if r["workload"] == workload}
        for dtype in ("fp32", "bf16"):
            if dtype in rows and f"{dtype}+hybrid" in rows:
                out[f"hybrid_vs_graph_{workload}_{dtype}"] = rows[f"{dtype}+hybrid"] / rows[dtype]
    return out


if __name__ == "__main__":
    main()
