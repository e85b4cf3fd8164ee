"""Test-only fault injection: stop or break a run at one exact point, so a test of a crash
is the crash it names (not wherever a timer happened to land).

    LAUNCHER_FAULT=KILL@steps:20         SIGKILL after the chunk of steps ending at global step 20
    LAUNCHER_FAULT=KILL@before_sidecar:65  SIGKILL with ckpt-65's TF files written, its sidecar not
    LAUNCHER_FAULT=KILL@after_save:45    SIGKILL right after ckpt-45 is complete (before its metrics
                                         reach MLflow)
    LAUNCHER_FAULT=TERM@steps:50         SIGTERM to itself there (preemption: save and stop)
    LAUNCHER_FAULT=RAISE@steps:3         raise an error there (a training failure)
    LAUNCHER_FAULT=PAUSE@steps:50        wait there until the file $LAUNCHER_FAULT_RESUME exists (a test
                                         changes the world, e.g. stops the tracking server, meanwhile)

Unset (always, outside tests) it costs one dictionary lookup per point.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from launcher.contract import Hook, Position

ENV = "LAUNCHER_FAULT"
RESUME_ENV = "LAUNCHER_FAULT_RESUME"
POINTS = ("steps", "before_sidecar", "after_save")


class InjectedFault(RuntimeError):
    pass


def parse(spec: str) -> tuple[str, str, int]:
    """`KILL@steps:20` -> ("KILL", "steps", 20)."""
    action, _, where = spec.partition("@")
    point, _, step = where.partition(":")
    if point not in POINTS or not step.isdigit() or action not in ("KILL", "TERM", "INT", "RAISE", "PAUSE"):
        raise ValueError(
            f"{ENV}={spec!r}: expected ACTION@POINT:STEP, ACTION in KILL/TERM/INT/RAISE/PAUSE, POINT in {POINTS}"
        )
    return action, point, int(step)


def fault_point(point: str, global_step: int) -> None:
    """Fire the configured fault if this is its point and step."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    action, wanted, step = parse(spec)
    if wanted != point or step != global_step:
        return
    if action == "RAISE":
        raise InjectedFault(f"{ENV}: injected failure at {point} {global_step}")
    if action == "PAUSE":
        resume = Path(os.environ[RESUME_ENV])
        print(f"\n{ENV}: paused at {point} {global_step} until {resume} exists", flush=True)
        deadline = time.monotonic() + 600
        while not resume.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return
    print(f"\n{ENV}: SIG{action} at {point} {global_step}", flush=True)
    os.kill(os.getpid(), getattr(signal, f"SIG{action}"))


class FaultHook(Hook):
    """First in the hook list, so a signal it sends is seen by the hooks after it at the same step."""

    def after_steps(self, position: Position, logs: dict) -> None:
        fault_point("steps", position.global_step)


def faults_enabled() -> bool:
    return bool(os.environ.get(ENV))
