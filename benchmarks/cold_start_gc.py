"""What freezing the imported heap saves a launch that starts as a new interpreter (a person's `python -m launcher`),
side by side: the same tiny launch (two epochs of the digits MLP, so start-up is most of it) as shipped and with
`launcher.console.load_tensorflow_quietly` as it was before (a plain import: the collector runs during it and
walks TensorFlow's heap at every full collection after). The two alternate over `--repeats`.

Prints each launch's CPU seconds (the launch process), its garbage collector's CPU seconds (all generations, from
`gc.callbacks`), its peak RSS, the medians and ranges, and the ratio shipped / before; writes JSON to
outputs/benchmarks-cold-start-gc.json.

    python benchmarks/cold_start_gc.py --repeats 4
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from ab import cpu_kind, interleaved, summary  # noqa: E402

RUNNER = """
import gc, json, os, resource, runpy, sys, time
spent, began = [0.0], [0.0]
def timed(phase, info):
    if phase == "start":
        began[0] = time.process_time()
    else:
        spent[0] += time.process_time() - began[0]
gc.callbacks.append(timed)
if {before!r}:
    import launcher.console as console
    def plain_import():
        with console.quiet_stderr():
            import tensorflow  # noqa: F401
    console.load_tensorflow_quietly = plain_import
def report():
    used = resource.getrusage(resource.RUSAGE_SELF)
    with open({out!r}, "w") as handle:
        json.dump({{"cpu_s": round(used.ru_utime + used.ru_stime, 2), "gc_s": round(spent[0], 2),
                   "rss_mb": round(used.ru_maxrss / 1024)}}, handle)
import atexit
atexit.register(report)
sys.argv = ["launcher", *{args!r}]
runpy.run_module("launcher", run_name="__main__")
"""


def sample(folder: Path, before: bool) -> dict:
    args = [
        f"hydra.run.dir={folder / 'run'}",
        f"tracking.uri=sqlite:///{folder / 'mlflow.db'}",
        "model.hidden_units=[32]",
        "train.epochs=2",
        "scaling.batch_size=32",
    ]
    out = folder / "figures.json"
    code = RUNNER.format(before=before, out=str(out), args=args)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=4)
    options = parser.parse_args()
    kinds = ("shipped", "before")
    print(f"CPU: {cpu_kind()}", flush=True)
    rows = interleaved(options.repeats, kinds, lambda folder, kind: sample(folder, kind == "before"), "cold-gc-")
    result = {"cpu": cpu_kind(), "rows": rows}
    result.update(summary(rows, kinds, ("cpu_s", "gc_s", "rss_mb")))
    out = ROOT / "outputs" / "benchmarks-cold-start-gc.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
