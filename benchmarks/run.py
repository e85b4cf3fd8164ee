"""Launcher vs the hand-written `model.fit` script, side by side, interleaved, in one process tree.

    .venv/bin/python benchmarks/run.py                 # every workload, 3 repetitions
    .venv/bin/python benchmarks/run.py --quick         # 1 repetition, fewer configs

Per workload (the 3x2048 MLP, the CNN, the transformer LM): every explicit step the launcher can run (fp32 / bf16 x
graph with Keras's update ops / hybrid with the fused update / xla), `auto` (precision=auto xla=auto tune=auto: the
steps timed once, then read from the benchmark's own cache), `rule` (the same with tune=off: the matmul rates'
rule), and `model.fit` configured the same way (precision, XLA and steps_per_execution matched, as a like-for-like
row per precision x XLA, and one matching what auto chose) plus the script as a person writes it
(steps_per_execution=1). Each measurement is a fresh subprocess (launcher: `python -m launcher ...`; baseline:
benchmarks/baseline_fit.py); the rows of a repetition run one after the other, repetitions interleave. Prints the
table, then the issue's goals marked met / not met, and writes JSON (medians over repetitions; examples/s excludes
the first, compiling epoch), with model FLOPs utilisation against the matmul peak of the row's compute dtype
measured in this run, time to first step, peak RSS, tuning cost, what MLflow tracking costs a run, replica-safe vs
stock LSO.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from workloads import WORKLOADS, launcher_overrides  # noqa: E402

KERAS_UPDATE, FUSED_UPDATE = ["optimizer.update=keras"], ["optimizer.update=fused"]
# The launcher's in-graph loop of steps; the like-for-like `model.fit` compiles the same (steps_per_execution).
STEPS_PER_EXECUTION = 16
SPE = [f"train.steps_per_execution={STEPS_PER_EXECUTION}"]
# row -> (precision, xla, extra launcher overrides). Explicit rows pin steps_per_execution; auto and rule leave it
# at its default (16), so tuning may try a longer call.
CONFIGS = {
    "fp32 graph": ("fp32", "false", KERAS_UPDATE + SPE),
    "fp32 hybrid": ("fp32", "false", FUSED_UPDATE + SPE),
    "fp32 xla": ("fp32", "true", SPE),
    "bf16 graph": ("bf16", "false", KERAS_UPDATE + SPE),
    "bf16 hybrid": ("bf16", "false", FUSED_UPDATE + SPE),
    "bf16 xla": ("bf16", "true", SPE),
    "auto": ("auto", "auto", ["tune=auto"]),
    "rule": ("auto", "auto", ["tune=off"]),
}
EXPLICIT = [name for name in CONFIGS if name not in ("auto", "rule")]
PLAN = {"mlp": list(CONFIGS), "cnn": list(CONFIGS), "lm": list(CONFIGS)}
QUICK = {
    "mlp": ["fp32 hybrid", "bf16 hybrid", "bf16 xla", "auto"],
    "cnn": ["fp32 graph", "bf16 graph", "auto"],
    "lm": ["fp32 xla", "bf16 hybrid", "auto"],
}
# The goals (issue 50, after issue 28's): auto against the best explicit step, against model.fit of the same
# precision (like for like), and the MFU of auto's row against its dtype's matmul peak measured in this run.
AUTO_VS_BEST = 0.95
AUTO_VS_FIT = {"mlp": 1.45, "lm": 1.5, "cnn": 1.5}
MFU_GOAL = {"mlp": 0.78, "cnn": 0.45, "lm": 0.55}
TUNING_BUDGET_SEC = 30.0


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
    step = decisions["step"]["value"]
    chosen = {
        "precision": decisions["precision"]["value"],
        "xla": "true" if decisions["xla"]["value"] else "false",
        "steps_per_execution": decisions["steps_per_execution"]["value"],
    }
    return {
        "chosen": f"{chosen['precision']} {step} x{chosen['steps_per_execution']}",
        "choice": chosen,
        "tune": decisions.get("tune", {}).get("reason", ""),
        "examples_per_sec": statistics.median(h["examples_per_sec"] for h in history[1:]),
        "epoch_time_sec": statistics.median(h["epoch_time_sec"] for h in history[1:]),
        "time_to_first_step_sec": history[0].get("time_to_first_step_sec"),
        "peak_rss_mb": json.loads(err.strip().splitlines()[-1])["peak_rss_mb"],
    }


def baseline_run(workload: str, precision: str, xla: str, steps_per_execution: int, epochs: int) -> dict:
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
    from launcher.launch.mfu import training_flops_per_example

    return training_flops_per_example(WORKLOADS[workload]["keras_model"]())


def tracking_cost(workload: str, epochs: int, untracked: float) -> float:
    """A tracked run (the defaults: epoch and step metrics, system metrics, into a SQLite store) against the
    untracked row's median: the fraction of throughput tracking costs, the way a run pays it."""
    with tempfile.TemporaryDirectory() as tmp:
        same = CONFIGS["fp32 graph"][2]  # the untracked fp32 row's own overrides, tracking switched on
        tracked = launcher_run(
            workload, "fp32", "false", epochs, [*same, "tracking.enabled=true", f"tracking.uri=sqlite:///{tmp}/m.db"]
        )
    return 1.0 - tracked["examples_per_sec"] / untracked


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workloads", default="", help="comma-separated subset of mlp,cnn,lm")
    parser.add_argument("--json", default=str(ROOT / "outputs" / "benchmarks.json"))
    args = parser.parse_args()
    plan = QUICK if args.quick else PLAN
    if args.workloads:
        plan = {w: plan[w] for w in args.workloads.split(",")}
    reps = 1 if args.quick else args.reps
    # The launches' own cache: auto tunes in this run, on this machine, and never reads or writes the person's.
    cache = tempfile.mkdtemp(prefix="launcher-bench-cache-")
    os.environ["LAUNCHER_CACHE"] = cache
    peak = peaks()
    print(machine_line(), flush=True)
    print(
        "matmul rate (2048^3, this run), GFLOP/s: "
        + ", ".join(
            f"{dtype} graph {peak[dtype + '_graph'] / 1e9:.0f} / XLA {peak[dtype + '_xla'] / 1e9:.0f}"
            for dtype in ("float32", "bfloat16")
        )
        + "; the peak of a dtype is the faster",
        flush=True,
    )
    results, tuning = [], {}
    for workload, configs in plan.items():
        flops = flops_per_example(workload)
        if "auto" in configs:  # the first launch of the signature times the candidates; later ones read the cache
            tuning[workload] = first_tuned_launch(workload, args.epochs)
            print(f"{workload}: tune=auto's first launch: {tuning[workload]['summary']}", flush=True)
        runs = {name: [] for name in configs}
        fits: dict[tuple, list] = {}
        for _ in range(reps):  # every row once per repetition: a slow minute of the machine hits each row once
            for name in configs:
                precision, xla, extra = CONFIGS[name]
                launched = launcher_run(workload, precision, xla, args.epochs, extra)
                runs[name].append(launched)
                for key in fit_keys(name, launched):
                    fits.setdefault(key, []).append(baseline_run(workload, *key, args.epochs))
        rows = [summarise(workload, name, runs[name], fits, flops, peak) for name in configs]
        for row in rows:
            print(format_row(row), flush=True)
        results += rows
    extra = overheads(results, args.epochs) if not args.quick else {}
    goals = judge(results, tuning)
    print("\nGoals (issue 50), " + machine_line())
    for goal in goals:
        verdict = {True: "met", False: "NOT MET", None: "n/a"}[goal["met"]]
        print(f"  [{verdict}] {goal['goal']}: {goal['measured']}")
    report = {
        "machine": machine_line(),
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d"),
        "peak_flops": peak,
        "results": results,
        "tuning": tuning,
        "goals": goals,
        **extra,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(json.dumps(extra, indent=2))
    print(f"JSON written to {args.json}")


def machine_line() -> str:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in flags.splitlines() if "model name" in line), "")
    kind = "AMX" if "amx_bf16" in flags else ("AVX-512 BF16, no AMX" if "avx512_bf16" in flags else "no bf16")
    return f"{model or platform.processor()}, {os.cpu_count()} cores, {kind}"


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip()


def first_tuned_launch(workload: str, epochs: int) -> dict:
    """The auto row's first launch: it times the candidates (the cost a person pays once per signature)."""
    launched = launcher_run(workload, "auto", "auto", epochs, ["tune=auto"])
    seconds = float(launched["tune"].split("timed now in ", 1)[1].split(" s", 1)[0])
    return {
        "seconds": seconds,
        "chosen": launched["chosen"],
        "time_to_first_step_sec": launched["time_to_first_step_sec"],
        "summary": f"{launched['chosen']} after {seconds:.0f} s of timing ({launched['tune']})",
    }


def fit_keys(name: str, launched: dict) -> list[tuple]:
    """The model.fit runs this row is compared with: (precision, xla, steps_per_execution). An explicit row: fit
    with its precision and XLA at the same steps per call (the update kind is the launcher's; fit has one), the
    first row of each precision also the script as a person writes it (one step per call). auto and rule: fit
    configured as they chose."""
    choice = launched["choice"]
    if name in ("auto", "rule"):
        return [(choice["precision"], choice["xla"], choice["steps_per_execution"])]
    precision, xla, _ = CONFIGS[name]
    keys = [(precision, xla, STEPS_PER_EXECUTION)]
    if name.endswith("graph"):
        keys.append((precision, "false", 1))
    return keys


def summarise(workload, name, launched_runs, fits, flops, peak) -> dict:
    first = launched_runs[0]
    choice = first["choice"]
    like = (choice["precision"], choice["xla"], choice["steps_per_execution"])
    script = (choice["precision"], "false", 1)

    def median(runs, key="examples_per_sec"):
        values = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(values) if values else None

    ours = median(launched_runs)
    theirs = median(fits.get(like, []))
    written = median(fits.get(script, []))
    dtype = "bfloat16" if choice["precision"] == "bf16" else "float32"
    return {
        "workload": workload,
        "config": name,
        "chosen": first["chosen"],
        "choices": sorted({r["chosen"] for r in launched_runs}),
        "launcher_examples_per_sec": ours,
        "launcher_runs": [r["examples_per_sec"] for r in launched_runs],
        "fit_examples_per_sec": theirs,  # model.fit, same precision, XLA and steps per call
        "fit_runs": [r["examples_per_sec"] for r in fits.get(like, [])],
        "ratio_vs_fit": ours / theirs if theirs else None,
        "script_examples_per_sec": written,  # model.fit as a person writes it: one step per call, no XLA
        "ratio_vs_script": ours / written if written else None,
        "mfu": ours * flops / peak[dtype],
        "fit_mfu": theirs * flops / peak[dtype] if theirs else None,
        "launcher_first_step_sec": median(launched_runs, "time_to_first_step_sec"),
        "fit_first_step_sec": median(fits.get(like, []), "time_to_first_step_sec"),
        "launcher_rss_mb": median(launched_runs, "peak_rss_mb"),
        "fit_rss_mb": median(fits.get(like, []), "peak_rss_mb"),
        "launcher_epoch_time_sec": median(launched_runs, "epoch_time_sec"),
    }


def format_row(r) -> str:
    def num(v, fmt):
        return format(v, fmt) if v is not None else "-"

    return (
        f"{r['workload']:<4}{r['config']:<12} ({r['chosen']:<20}) "
        f"launcher {r['launcher_examples_per_sec']:>8.0f} ex/s  "
        f"fit {num(r['fit_examples_per_sec'], '>8.0f')} ({num(r['ratio_vs_fit'], '.2f')}x)  "
        f"script {num(r['script_examples_per_sec'], '>7.0f')} ({num(r['ratio_vs_script'], '.2f')}x)  "
        f"MFU {r['mfu']:.0%}  "
        f"first step {r['launcher_first_step_sec']:.1f}s vs fit {num(r['fit_first_step_sec'], '.1f')}s  "
        f"RSS {r['launcher_rss_mb']:.0f} vs {num(r['fit_rss_mb'], '.0f')} MB"
    )


def judge(results: list[dict], tuning: dict) -> list[dict]:
    """The issue's goals against this run's rows, each marked met or not."""
    goals = []
    for workload in dict.fromkeys(r["workload"] for r in results):
        rows = {r["config"]: r for r in results if r["workload"] == workload}
        auto = rows.get("auto")
        if auto is None:
            continue
        explicit = [r for name, r in rows.items() if name in EXPLICIT]
        if explicit:
            best = max(explicit, key=lambda r: r["launcher_examples_per_sec"])
            ratio = auto["launcher_examples_per_sec"] / best["launcher_examples_per_sec"]
            goals.append(
                {
                    "goal": f"{workload}: auto >= {AUTO_VS_BEST}x the best explicit step",
                    "measured": f"{ratio:.2f}x ({auto['chosen']} vs {best['config']})",
                    "met": ratio >= AUTO_VS_BEST,
                }
            )
        if auto["ratio_vs_fit"] is not None:
            wanted = AUTO_VS_FIT[workload]
            goals.append(
                {
                    "goal": f"{workload}: auto >= {wanted}x model.fit of the same precision, XLA and steps per call",
                    "measured": f"{auto['ratio_vs_fit']:.2f}x (the script as a person writes it: "
                    f"{auto['ratio_vs_script'] or float('nan'):.2f}x)",
                    "met": auto["ratio_vs_fit"] >= wanted,
                }
            )
        goals.append(
            {
                "goal": f"{workload}: MFU of auto >= {MFU_GOAL[workload]:.0%} of its dtype's matmul peak",
                "measured": f"{auto['mfu']:.0%}",
                "met": auto["mfu"] >= MFU_GOAL[workload],
            }
        )
        if "rule" in rows:
            cached, untuned = auto["launcher_first_step_sec"], rows["rule"]["launcher_first_step_sec"]
            same = auto["chosen"] == rows["rule"]["chosen"]  # another step compiles in another time
            goals.append(
                {
                    "goal": f"{workload}: a cached tune=auto launch starts no slower than tune=off (first step)",
                    "measured": f"{cached:.1f} s vs {untuned:.1f} s"
                    + ("" if same else f" (not comparable: {auto['chosen']} vs {rows['rule']['chosen']})"),
                    # medians of 2-3 launches: 5 % + 0.2 s is noise
                    "met": cached <= untuned * 1.05 + 0.2 if same else None,
                }
            )
        if workload in tuning:
            goals.append(
                {
                    "goal": f"{workload}: tuning once <= {TUNING_BUDGET_SEC:.0f} s",
                    "measured": f"{tuning[workload]['seconds']:.0f} s",
                    "met": tuning[workload]["seconds"] <= TUNING_BUDGET_SEC,
                }
            )
    return goals


def overheads(results, epochs) -> dict:
    out = {}
    fp32 = [r for r in results if r["config"] == "fp32 graph" and r["workload"] == "mlp"]
    if fp32:  # one tracked run: within this machine's run-to-run noise (+-5-10%) it says little on its own
        out["mlflow_tracking_cost_fraction"] = tracking_cost("mlp", epochs, fp32[0]["launcher_examples_per_sec"])
    stock = launcher_run("small", "mixed", "false", epochs, ["loss_scale.implementation=stock"])
    safe = launcher_run("small", "mixed", "false", epochs, ["loss_scale.implementation=replica_safe"])
    out["replica_safe_vs_stock_step_time"] = stock["examples_per_sec"] / safe["examples_per_sec"]
    for workload in dict.fromkeys(r["workload"] for r in results):
        rows = {r["config"]: r["launcher_examples_per_sec"] for r in results if r["workload"] == workload}
        for dtype in ("fp32", "bf16"):
            if f"{dtype} graph" in rows and f"{dtype} hybrid" in rows:
                out[f"hybrid_vs_graph_{workload}_{dtype}"] = rows[f"{dtype} hybrid"] / rows[f"{dtype} graph"]
        if "auto" in rows and "rule" in rows:
            out[f"tuned_vs_rule_{workload}"] = rows["auto"] / rows["rule"]
    return out


if __name__ == "__main__":
    main()
