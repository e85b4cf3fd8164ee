"""What the forkserver's preparation saves each launch it forks, side by side: the same tiny launch (one epoch of
the digits MLP, so start-up is most of it) forked from a server as shipped and from one without one step:
`--without prepare` (its `PREPARE` work) or `--without freeze` (its heap left to the garbage collector).

Each sample is a new server process (imports, then the steps it keeps) that forks one launch; the launch's own
CPU is what the server's `wait4` reports, so the server's imports are not counted on either side. The two kinds
alternate over `--repeats`. Prints each sample, the medians and ranges, and the ratio shipped / without.

    python benchmarks/fork_prepare.py --repeats 4 --without prepare
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from ab import interleaved, summary  # noqa: E402

SERVER = """
import json, os, sys
from launcher.forkserver import server
if {without!r} == "prepare":
    server.PREPARE = ()
server.preload()
if {without!r} != "freeze":
    server.freeze_heap()
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


def sample(folder: Path, without: str) -> dict:
    args = [
        "model.hidden_units=[32]",
        "train.epochs=1",
        "scaling.batch_size=32",
        f"tracking.uri=sqlite:///{folder}/mlflow.db",
        f"hydra.run.dir={folder}/run",
    ]
    code = SERVER.format(without=without, args=args)
    done = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, check=True)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    if row["code"] != 0:
        raise SystemExit(f"the launch failed (exit {row['code']})")
    return {"cpu_s": round(row["cpu_s"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--without", choices=("prepare", "freeze"), default="prepare")
    options = parser.parse_args()
    kinds = ("shipped", f"without-{options.without}")
    without = {kinds[0]: "", kinds[1]: options.without}  # the step each kind's server leaves out
    rows = interleaved(options.repeats, kinds, lambda folder, kind: sample(folder, without[kind]), "fork-")
    result = summary(rows, kinds, ("cpu_s",))
    out = ROOT / "outputs" / f"benchmarks-fork-without-{options.without}.json"
    out.parent.mkdir(exist_ok=True)
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    out.write_text(json.dumps({"machine": machine, "rows": rows, "summary": result}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
