"""One launch per run dir (`launcher.dirlock` on `<run dir>/launch.lock`): a second launch on the same dir is
refused as a ConfigError naming the launch that holds it, and writes nothing there."""

from __future__ import annotations

from pathlib import Path

from launcher.config.errors import ConfigError, Violation
from launcher.dirlock import LOCK_FILE, DirLock, Held, describe

__all__ = ["LOCK_FILE", "RunDirBusy", "RunDirLock"]


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
