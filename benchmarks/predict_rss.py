"""Peak memory of batch predictions: `mode=predict eval.input=<a ~1 GB CSV>` must stay under 1.5 GB of RSS.

Under a temporary folder (never ~/.cache; removed at the end unless --keep): a tiny digits MLP trained by the CLI,
a CSV of digits features (64 raw intensities 0..16, `inputs_0..inputs_63`, an `id` column) grown to --size-gb, and a
1 MB one. Each is predicted by `python -m launcher mode=predict` in a new interpreter (LAUNCHER_FORKSERVER=off:
nothing inherited) whose peak RSS is what `wait4` reports for it (ru_maxrss). The 1 MB run is the fixed cost
(TensorFlow, the SavedModel, MLflow); the difference is what streaming the input costs.

    python benchmarks/predict_rss.py               # --size-gb 1.0
    python benchmarks/predict_rss.py --size-gb 0.1 --keep
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

ROOT = Path(__file__).resolve().parent.parent
TARGET_MB = 1500.0  # 1.5 GB
TINY = ["model.hidden_units=[32]", "train.epochs=1", "scaling.batch_size=32", "precision=fp32", "xla=false"]


def launch(args: list[str], folder: Path) -> dict:
    """`python -m launcher <args>` in a new interpreter: its exit code, wall seconds and peak RSS (MB)."""
    env = {**os.environ, "LAUNCHER_FORKSERVER": "off", "TF_CPP_MIN_LOG_LEVEL": "2"}
    started = time.perf_counter()
    with open(folder / "launch.log", "ab") as log:
        child = subprocess.Popen([sys.executable, "-m", "launcher", *args], cwd=ROOT, env=env, stdout=log, stderr=log)
        _, status, usage = os.wait4(child.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"launch failed ({code}): {args}; see {folder / 'launch.log'}")
    return {"seconds": time.perf_counter() - started, "peak_rss_mb": usage.ru_maxrss * 1024 / 1e6}


def write_csv(path: Path, size_bytes: int) -> int:
    """Digits features, repeated in order until the file holds `size_bytes`; returns the rows written."""
    from sklearn.datasets import load_digits

    flat = load_digits().images.astype("float32").reshape(-1, 64)
    rows = 0
    with pcsv.CSVWriter(str(path), _table(flat, 0).schema) as writer:
        while path.stat().st_size < size_bytes:
            writer.write_table(_table(flat, rows))
            rows += len(flat)
    return rows


def _table(flat, start: int) -> pa.Table:
    ids = pa.array(np.arange(start, start + len(flat), dtype=np.int64))
    return pa.table({"id": ids, **{f"inputs_{j}": flat[:, j] for j in range(flat.shape[1])}})


def cpu() -> dict:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    return {"cpu": name or platform.processor(), "cores": os.cpu_count(), "amx_bf16": "amx_bf16" in info}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (its path is printed)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="predict-rss-"))
    try:
        store = f"tracking.uri=sqlite:///{folder}/mlflow.db"
        launch([f"hydra.run.dir={folder}/train", store, *TINY], folder)
        results = {**cpu(), "target_mb": TARGET_MB}
        for name, size in (("small", 1e6), ("large", args.size_gb * 1e9)):
            started = time.perf_counter()
            rows = write_csv(folder / f"{name}.csv", int(size))
            written = time.perf_counter() - started
            ran = launch(
                [
                    f"hydra.run.dir={folder}/{name}",
                    store,
                    "mode=predict",
                    f"eval.run={folder}/train",
                    f"eval.input={folder}/{name}.csv",
                    "eval.ids=id",
                ],
                folder,
            )
            summary = json.loads((folder / name / "batch.json").read_text())
            assert summary["examples"] == rows, (summary, rows)
            results[name] = {
                "input_gb": (folder / f"{name}.csv").stat().st_size / 1e9,
                "rows": rows,
                "csv_write_seconds": round(written, 1),
                "predict_seconds_in_launch": summary["seconds"],
                "launch_seconds": round(ran["seconds"], 1),
                "peak_rss_mb": round(ran["peak_rss_mb"], 1),
                "output_mb": round((folder / name / "predictions.parquet").stat().st_size / 1e6, 1),
            }
            print(name, json.dumps(results[name]), flush=True)
            (folder / f"{name}.csv").unlink()
        large = results["large"]
        results["ratio_to_target"] = round(large["peak_rss_mb"] / TARGET_MB, 3)
        results["streaming_cost_mb"] = round(large["peak_rss_mb"] - results["small"]["peak_rss_mb"], 1)
        print(json.dumps(results, indent=2))
        print(
            f"peak RSS {large['peak_rss_mb']:.0f} MB predicting {large['input_gb']:.2f} GB ({large['rows']} rows): "
            f"{results['ratio_to_target']:.2f}x the {TARGET_MB:.0f} MB target "
            f"({results['small']['peak_rss_mb']:.0f} MB for a 1 MB input)"
        )
    finally:
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
