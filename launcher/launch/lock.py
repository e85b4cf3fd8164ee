"""One launch per run dir (`launcher.dirlock` on `<run dir>/launch.lock`): a second launch on the same dir is
refused as a ConfigError naming the launch that holds it, and writes nothing there."""

from __future__ import annotations

from pathlib import Path

from launcher.config.errors import ConfigError, Violation
from launcher.dirlock import LOCK_FILE, DirLock, Held, describe

__all__ = ["CHECKPOINTS_LOCK_FILE", "CheckpointDirLock", "LOCK_FILE", "RunDirBusy", "RunDirLock"]
CHECKPOINTS_LOCK_FILE = "checkpoints.lock"  # a checkpoint.directory outside the run dir


class RunDirBusy(ConfigError):
    """Another live launch holds the run dir: refuse without writing anything in it."""


class RunDirLock(DirLock):
    """Held from before the first write in the run dir until the launch ends."""

    def __init__(self, run_dir: Path):
        super().__init__(run_dir, LOCK_FILE, "launch")

    def acquire(self) -> None:
        try:
            super().acquire()
        except Held as held:
            raise RunDirBusy([_busy(held)]) from None


def _busy(held: Held) -> Violation:
    return Violation(
        key="hydra.run.dir",
        value=str(held.directory),
        expected=f"a run dir no other launch is using (this one is held by {describe(held.owner)})",
        fix="wait for that launch to finish (re-running then resumes it), stop it, or give this launch "
        "another name= / hydra.run.dir=",
    )


class CheckpointDirLock(DirLock):
    """A `checkpoint.directory` of its own (outside the run dir), held by one launch: two runs started together on
    one new directory, before either has checkpointed and named it its own, cannot both write there."""

    def __init__(self, directory: Path):
        super().__init__(directory, CHECKPOINTS_LOCK_FILE, "launch")

    def acquire(self) -> None:
        try:
            super().acquire()
        except Held as held:
            raise RunDirBusy(
                [
                    Violation(
                        key="checkpoint.directory",
                        value=str(held.directory),
                        expected=f"a checkpoint directory no other launch is using (held by {describe(held.owner)})",
                        fix="give each run its own directory (checkpoint.directory=/shared/checkpoints/${name}), or "
                        "wait for that launch to finish",
                    )
                ]
            ) from None
