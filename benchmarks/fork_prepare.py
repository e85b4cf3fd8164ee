"""What the forkserver's `PREPARE` saves each launch it forks, side by side: the same tiny launch (one epoch of the
digits MLP, so start-up is most of it) forked from a server that ran `PREPARE` and from one that only imported.

Each sample is a new server process (imports, with or without `PREPARE`) that forks one launch; the launch's own
CPU is what the server's `wait4` reports, so the server's imports are not counted on either side. The two kinds
alternate over `--repeats`. Prints each sample, the medians and ranges, and the ratio prepared / unprepared.

    python benchmarks/fork_prepare.py --repeats 4
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SERVER = """
import json, os, sys
from launcher import forkserver
if not {prepared}:
    forkserver.PREPARE = ()
forkserver.preload()
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    import runpy
    sys.argv = ["-m", *{args!r}]
    code = 0
    try:
        runpy._run_module_as_main("launcher", alter_argv=True)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    os._exit(code)
_, status, usage = os.wait4(pid, 0)
print(json.dumps({{"code": os.waitstatus_to_exitcode(status), "cpu_s": usage.ru_utime + usage.ru_stime}}))
"""


def sample(folder: Path, prepared: bool) -> dict:
    args = [
        "model.hidden_units=[32]",
        "train.epochs=1",
        "scaling.batch_size=32",
        f"tracking.uri=sqlite:///{folder}/mlflow.db",
        f"hydra.run.dir={folder}/run",
    ]
    code = SERVER.format(prepared=prepared, args=args)
    done = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, check=True)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    if row["code"] != 0:
        raise SystemExit(f"the launch failed (exit {row['code']})")
    return {"prepared": prepared, "cpu_s": round(row["cpu_s"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=4)
    options = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="fork-prepare-") as scratch:
        for repeat in range(options.repeats):
            for prepared in (True, False) if repeat % 2 == 0 else (False, True):
                folder = Path(scratch) / f"{repeat}-{prepared}"
                folder.mkdir()
                row = {"repeat": repeat, **sample(folder, prepared)}
                rows.append(row)
                print(f"repeat {repeat}  {'prepared  ' if prepared else 'unprepared'}  {row['cpu_s']:6.2f} CPU-s")
    summary = {}
    for kind in (True, False):
        cpu = [r["cpu_s"] for r in rows if r["prepared"] is kind]
        name = "prepared" if kind else "unprepared"
        summary[name] = {"median": statistics.median(cpu), "min": min(cpu), "max": max(cpu)}
    summary["ratio"] = round(summary["prepared"]["median"] / summary["unprepared"]["median"], 3)
    print(f"prepared {summary['prepared']}  unprepared {summary['unprepared']}  ratio {summary['ratio']:.2f}")
    out = ROOT / "outputs" / "benchmarks-fork-prepare.json"
    out.parent.mkdir(exist_ok=True)
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    out.write_text(json.dumps({"machine": machine, "rows": rows, "summary": summary}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
