"""What an epoch's end costs a run beyond its training steps: this checkout against an earlier commit, interleaved.

    .venv/bin/python benchmarks/epoch_boundary.py                              # vs 337db49, the LM, 3 repetitions
    .venv/bin/python benchmarks/epoch_boundary.py --workload mlp --baseline <commit> --reps 5

Each side launches `python -m launcher` on a workload of `benchmarks/run.py` (precision, XLA and the update fixed,
so both run the same step) for `--epochs` epochs into an SQLite MLflow store. An epoch's wall time is the gap
between its metrics and the previous epoch's in MLflow (stamped when the epoch ends); what it costs beyond its
steps is that minus the epoch's own `epoch_time_sec` (the steps): validation, logging and whatever else an epoch
end does. The first epoch (tracing) is left out. Prints per side the median of that cost per epoch, its range,
and the epochs' median wall time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ab import interleaved, summary  # noqa: E402
from workloads import launcher_overrides  # noqa: E402
from worktree import KINDS, launch, this_and_baseline  # noqa: E402


def epoch_costs(tree: Path, pythonpath: str, workload: str, epochs: int, folder: Path) -> dict:
    """One launch from `tree`: the median seconds an epoch end costs beyond the steps, its range, the epoch wall."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{folder / 'mlflow.db'}"
    overrides = [
        *launcher_overrides(workload),
        *("precision=bf16", "xla=false", "optimizer.update=fused", f"train.epochs={epochs}", f"tracking.uri={uri}"),
        *("checkpoint=off", "checkpoint.export_model=false", f"hydra.run.dir={folder / 'run'}"),
    ]
    launch(tree, pythonpath, folder, overrides, timeout=1800)
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    steps = sorted(client.get_metric_history(run.info.run_id, "epoch_time_sec"), key=lambda m: m.timestamp)
    walls = [(b.timestamp - a.timestamp) / 1000 for a, b in zip(steps, steps[1:], strict=False)]
    costs = [wall - m.value for wall, m in zip(walls, steps[1:], strict=True)]
    return {
        "end_cost": round(statistics.median(costs), 3),
        "end_cost_max": round(max(costs), 3),
        "epoch_wall": round(statistics.median(walls), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default="337db49")
    parser.add_argument("--workload", default="lm")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="epoch-boundary-") as scratch,
        this_and_baseline(args.baseline, Path(scratch)) as (trees, paths),
    ):
        rows = interleaved(
            args.reps,
            KINDS,
            lambda folder, kind: epoch_costs(trees[kind], paths[kind], args.workload, args.epochs, folder),
            prefix="epoch-boundary-",
        )
    summary(rows, KINDS, ("end_cost", "end_cost_max", "epoch_wall"))


if __name__ == "__main__":
    main()
