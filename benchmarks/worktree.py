"""This checkout beside an earlier commit, for the A/B benchmarks that launch the launcher from both: a git worktree of
the commit, and per side a PYTHONPATH that puts its launcher, models and datasets first."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("this", "baseline")


@contextmanager
def this_and_baseline(baseline: str, scratch: Path) -> Iterator[tuple[dict[str, Path], dict[str, str]]]:
    """({"this": ROOT, "baseline": worktree}, each side's PYTHONPATH); the worktree is removed afterwards."""
    base = scratch / "baseline"
    subprocess.run(["git", "worktree", "add", "--detach", str(base), baseline], cwd=ROOT, check=True)
    try:
        trees, paths = {"this": ROOT, "baseline": base}, {}
        for name, tree in trees.items():
            shim = scratch / f"path-{name}"
            shim.mkdir()
            (shim / "launcher_models").symlink_to(tree / "models")
            (shim / "launcher_datasets").symlink_to(tree / "datasets")
            paths[name] = f"{tree}:{shim}"
        yield trees, paths
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, capture_output=True)


def launch(tree: Path, pythonpath: str, cache: Path, overrides: list[str], timeout: int = 900) -> None:
    """`python -m launcher <overrides>` from one side's tree, with its own LAUNCHER_CACHE; stops the benchmark with
    the launch's error when it fails."""
    env = {**os.environ, "PYTHONPATH": pythonpath, "TF_CPP_MIN_LOG_LEVEL": "2", "LAUNCHER_CACHE": str(cache)}
    command = [sys.executable, "-m", "launcher", *overrides]
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True, env=env, timeout=timeout)
    if done.returncode:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
