"""Where a launch's run dir is, and which launches leave none.

`hydra.run.dir` is `${run_dir_for:${mode},${name},${eval.run}}`: a training launch's dir is outputs/runs/<name>
(no name: a timestamp); an eval or predict nests in the dir of the run it reads, <run dir>/<mode>/<name or
timestamp>, so a run's evaluations sit beside its model and outputs/runs lists training runs only. Hydra resolves it
once, after the overrides and before it creates the dir: the resolver notes whether the dir is new.

A launch that explains (explain=true) or is refused (exit 2) leaves no run dir: `discard_new_run_dir` removes a dir
this launch created, and the parents it created, once its lock is free. A dir that was there before the launch (a
named run resumed, an eval named again) is never removed: the refusal is appended to its console.log. A dir given as
`hydra.run.dir=` is the person's own (and a supervisor's, a sweep job's, a worker's): this resolver never chose it,
so it is kept as well.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from launcher.config.schema import run_dir_name
from launcher.files import PLAN_FILE
from launcher.launch.find_run import RUN_ID, local_run_with_id, local_training_run
from launcher.launch.lock import RunDirBusy, RunDirLock
from launcher.outcome import EXIT_FINISHED, EXIT_REFUSED

RESOLVER = "run_dir_for"
READING = ("eval", "predict")  # the modes that read a trained run
# The new dirs chosen in this process: absolute path -> the deepest ancestor that was already there.
_new: dict[Path, Path] = {}


def run_dir_for(mode: object, name: str, reads: str) -> str:
    """The run dir of a launch of `mode` named `name` (`reads`: eval.run, the run an eval or predict reads)."""
    mode = str(getattr(mode, "value", mode))  # the schema's Mode, or its string
    launch_dir = Path.cwd()  # Hydra resolves this before anything changes directory (hydra.job.chdir=false)
    if mode not in READING:
        path = launch_dir / "outputs" / "runs" / run_dir_name(name)
    else:
        path = read_run_dir(reads, launch_dir) / mode / run_dir_name(name)
    _note(path)
    return str(path)


def read_run_dir(reads: str, launch_dir: Path) -> Path:
    """The dir of the run eval.run names, as far as this machine shows it without MLflow; else outputs (the launch
    writes in outputs/<mode>/<time>): an MLflow run whose dir is not under outputs/runs, a run dir this user cannot
    write in (a colleague's, read-only), or no such run (then refused)."""
    found = local_training_run(reads, launch_dir)
    if found is None and RUN_ID.match(reads):
        found = local_run_with_id(reads, launch_dir)
    return found if found is not None and os.access(found, os.W_OK) else launch_dir / "outputs"


def _note(path: Path) -> None:
    if path.exists():
        _new.pop(path, None)
        return
    _new[path] = next(parent for parent in path.parents if parent.exists())


def is_new(run_dir: Path) -> bool:
    """This launch's resolver chose `run_dir` and it did not exist before: a dir only this launch wrote in."""
    return Path(run_dir) in _new


def has_plan(run_dir: Path) -> bool:
    """A launch wrote its Plan in `run_dir` before (an explain never writes over it)."""
    return (Path(run_dir) / PLAN_FILE).exists()


def what_explain_kept(run_dir: Path, planned_before: bool) -> str:
    """What an explain=true launch leaves in `run_dir`, as its last line says."""
    if is_new(run_dir):
        return "no run dir kept"
    if planned_before:
        return f"the run's own {Path(run_dir) / PLAN_FILE} kept (not written over)"
    return f"Plan written to {Path(run_dir) / PLAN_FILE}"


def leaves_no_run_dir(mode: str, explain: bool, code: int) -> bool:
    """A refused launch (exit 2) of a mode that runs in a run dir, or a training launch that only explained."""
    explained = mode == "train" and explain and code == EXIT_FINISHED
    return explained or (mode in ("train", *READING, "doctor") and code == EXIT_REFUSED)


def discard_new_run_dir(run_dir: Path) -> bool:
    """Remove `run_dir` and the parents this launch created when this launch created it and no launch holds it now;
    True when removed."""
    run_dir = Path(run_dir)
    kept = _new.get(run_dir)
    if kept is None or not run_dir.is_dir():
        return False
    try:
        with RunDirLock(run_dir):  # another launch started in it since: its dir now
            shutil.rmtree(run_dir)
    except (RunDirBusy, OSError) as err:
        print(f"NOTICE: {run_dir} kept ({err})", file=sys.stderr, flush=True)
        return False
    del _new[run_dir]
    for parent in run_dir.parents:
        if parent == kept or not parent.is_relative_to(kept):
            break
        try:
            parent.rmdir()  # only when empty: another launch's dir beside it stays
        except OSError:
            break
    return True


def register() -> None:
    """`${run_dir_for:...}` for conf/config.yaml's hydra.run.dir (cached: one timestamp per composed config)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, run_dir_for, use_cache=True)
