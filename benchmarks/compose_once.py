"""What composing the config once saves a launch (`launcher.config.run_mode`), side by side in one process: the same
launch through the real entry (Hydra's main, the shell) as shipped ("once") and with Hydra's own mode discovery,
which composes the whole config a second time only to read `hydra.mode` ("twice"). The two alternate over
`--repeats`, after one launch that warms the process (imports, AutoGraph's conversions).

The launch is `explain=true` by default (the Plan only: start-up is all of it); `--train` makes it a tiny training
run of the digits MLP without tracking. Prints each launch's CPU seconds, the medians and ranges and the ratio
once / twice; writes JSON to outputs/benchmarks-compose-once.json.

    python benchmarks/compose_once.py --repeats 10
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from ab import cpu_kind, interleaved, summary  # noqa: E402

KINDS = ("once", "twice")


def launch_args(train: bool) -> list[str]:
    """The launch both kinds run: a tiny digits MLP without tracking, the Plan only unless `train`."""
    what = ["model.hidden_units=[32]", "train.epochs=1", "tracking.enabled=false", "checkpoint.export_model=false"]
    return what if train else [*what, "explain=true"]


def cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--train", action="store_true", help="a tiny training run instead of explain=true")
    parser.add_argument("--first", action="store_true", help="each launch the first of a process that preloaded")
    args = parser.parse_args()
    if args.first:
        return first_launches(args)
    import launcher.__main__ as entry
    from launcher.config import run_mode

    shipped = run_mode.decided_by_flags
    what = launch_args(args.train)

    import contextlib
    import logging

    from absl import logging as absl_logging

    root = logging.getLogger()
    quiet = open(os.devnull, "w")  # noqa: SIM115  (the process's lifetime)
    # Hydra configures logging for each job and closes every handler: absl's (TensorFlow is loaded before Hydra
    # here, unlike in a CLI process) would close the stream it holds.
    absl_logging.get_absl_handler().python_handler.stream = quiet

    def launch(folder: Path, kind: str) -> dict:
        run_mode.decided_by_flags = shipped if kind == "once" else (lambda argv: False)
        sys.argv = ["launcher", f"hydra.run.dir={folder}/run", *what]
        handlers, level = list(root.handlers), root.level
        start = cpu()
        try:
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                entry.entry()
        except SystemExit as exit_:
            if exit_.code:
                raise
        finally:
            spent = cpu() - start
            run_mode.decided_by_flags = shipped
            root.handlers[:], root.level = handlers, level
        return {"cpu_s": round(spent, 3)}

    print(f"CPU: {cpu_kind()}; launch: {' '.join(what)}", flush=True)
    interleaved(1, KINDS, launch, "compose-once-warm-")  # imports and first traces, not counted
    rows = interleaved(args.repeats, KINDS, launch, "compose-once-")
    result = {"cpu": cpu_kind(), "launch": what, "rows": rows, **summary(rows, KINDS, ("cpu_s",))}
    out = ROOT / "outputs" / "benchmarks-compose-once.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1))


def first_launches(args) -> None:
    """Each sample a new interpreter that imports what the forkserver does (`preload`), then times its first
    launch: what a launch the forkserver forks pays (Hydra's first compose in a process costs more than later ones)."""
    import subprocess

    what = launch_args(args.train)

    def launch(folder: Path, kind: str) -> dict:
        code = FIRST.format(twice=kind == "twice", argv=["launcher", f"hydra.run.dir={folder}/run", *what])
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
        return {"cpu_s": float(done.stdout.strip().splitlines()[-1])}

    print(f"CPU: {cpu_kind()}; first launch of a preloaded process: {' '.join(what)}", flush=True)
    rows = interleaved(args.repeats, KINDS, launch, "compose-once-first-")
    result = {"cpu": cpu_kind(), "launch": what, "first": True, "rows": rows, **summary(rows, KINDS, ("cpu_s",))}
    out = ROOT / "outputs" / "benchmarks-compose-once-first.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1))


FIRST = """
import contextlib, io, os, resource, sys
from launcher.forkserver.server import preload
preload()
import launcher.__main__ as entry
from launcher.config import run_mode
if {twice}:
    run_mode.decided_by_flags = lambda argv: False
sys.argv = {argv!r}
used = resource.getrusage(resource.RUSAGE_SELF); start = used.ru_utime + used.ru_stime
with contextlib.redirect_stdout(io.StringIO()):
    try:
        entry.entry()
    except SystemExit as exit_:
        assert not exit_.code
used = resource.getrusage(resource.RUSAGE_SELF)
print(round(used.ru_utime + used.ru_stime - start, 3))
"""


if __name__ == "__main__":
    main()
