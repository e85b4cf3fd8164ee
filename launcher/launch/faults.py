"""Test-only fault injection: stop or break a run at one exact point, so a test of a crash
is the crash it names (not wherever a timer happened to land).

    LAUNCHER_FAULT=KILL@steps:20         SIGKILL after the chunk of steps ending at global step 20
    LAUNCHER_FAULT=KILL@before_sidecar:65  SIGKILL with ckpt-65's TF files written, its sidecar not
    LAUNCHER_FAULT=KILL@after_save:45    SIGKILL right after ckpt-45 is complete (before its metrics
                                         reach MLflow)
    LAUNCHER_FAULT=KILL@before_remote_sidecar:46  SIGKILL with ckpt-46's TF files uploaded to the object store,
                                         its sidecar not (checkpoint.directory=s3://...)
    LAUNCHER_FAULT=KILL@run_created:0    SIGKILL right after the MLflow run is created (before any training)
    LAUNCHER_FAULT=TERM@steps:50         SIGTERM to itself there (preemption: save and stop)
    LAUNCHER_FAULT=USR1@steps:50         SIGUSR1 there (Slurm's time-limit warning, strategy.slurm_requeue)
    LAUNCHER_FAULT=RAISE@steps:3         raise an error there (a training failure)
    LAUNCHER_FAULT=KILL@steps:22#2       ... only in the first 2 attempts of a run train.max_restarts restarts
    LAUNCHER_FAULT=PAUSE@steps:50        wait there until the file $LAUNCHER_FAULT_RESUME exists (a test
                                         changes the world, e.g. stops the tracking server, meanwhile)

Armed only when LAUNCHER_TEST_FAULTS is set too (the test suite sets it): a LAUNCHER_FAULT left in a shell
is ignored with a Plan warning. An armed fault is checked at launch (a malformed value is refused, exit 2),
is in the Plan (`fault`) and so in the MLflow tags (`plan.fault`). Unset, it costs two dictionary lookups
per point.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from launcher.config.errors import ConfigError
from launcher.contract import Hook, Position
from launcher.supervise.restarts import attempt_number

ENV = "LAUNCHER_FAULT"
RESUME_ENV = "LAUNCHER_FAULT_RESUME"
# The second opt-in: without it a LAUNCHER_FAULT left in a shell is ignored (with a Plan warning), never fired.
OPT_IN = "LAUNCHER_TEST_FAULTS"
POINTS = ("steps", "before_sidecar", "after_save", "run_created", "before_remote_sidecar")
ACTIONS = ("KILL", "TERM", "INT", "USR1", "RAISE", "PAUSE")
PAUSE_LIMIT_SECONDS = 600


class InjectedFault(RuntimeError):
    pass


@dataclass(frozen=True)
class Fault:
    """One armed fault: what happens, at which point, at which global step."""

    action: str
    point: str
    step: int
    attempts: int | None = None  # fire only in restarts 0 .. attempts - 1 (None: in every one)

    def describe(self) -> str:
        limit = f"#{self.attempts}" if self.attempts is not None else ""
        return f"{self.action}@{self.point}:{self.step}{limit}"


def parse(spec: str) -> Fault:
    """`KILL@steps:20` -> Fault("KILL", "steps", 20); a malformed value is a ConfigError naming the variable."""
    action, _, where = spec.partition("@")
    point, _, step = where.partition(":")
    step, limited, attempts = step.partition("#")
    if point not in POINTS or not step.isdigit() or action not in ACTIONS or (limited and not attempts.isdigit()):
        raise ConfigError.single(
            ENV,
            spec,
            f"ACTION@POINT:STEP[#ATTEMPTS] with ACTION in {list(ACTIONS)} and POINT in {list(POINTS)}",
            f"unset {ENV} (it is for tests), or e.g. {ENV}=KILL@steps:20",
        )
    if action == "PAUSE" and not os.environ.get(RESUME_ENV):
        raise ConfigError.single(
            ENV,
            spec,
            f"a PAUSE fault with {RESUME_ENV} naming the file that ends the pause",
            f"export {RESUME_ENV}=<a path the test creates>",
        )
    return Fault(action, point, int(step), int(attempts) if limited else None)


def armed() -> Fault | None:
    """The fault this process fires, checked at launch: None unless both variables are set."""
    spec = os.environ.get(ENV)
    if not spec or not os.environ.get(OPT_IN):
        return None
    return parse(spec)


def ignored() -> str | None:
    """The Plan warning for a LAUNCHER_FAULT set without the opt-in (a leftover export): it is not fired."""
    spec = os.environ.get(ENV)
    if spec and not os.environ.get(OPT_IN):
        return f"{ENV}={spec} is set but ignored ({OPT_IN} is not set: fault injection is for tests); unset it."
    return None


def fault_point(point: str, global_step: int) -> None:
    """Fire the armed fault if this is its point and step."""
    fault = armed()
    if fault is None or fault.point != point or fault.step != global_step:
        return
    if fault.attempts is not None and attempt_number() >= fault.attempts:
        return
    if fault.action == "RAISE":
        raise InjectedFault(f"{ENV}: injected failure at {point} {global_step}")
    if fault.action == "PAUSE":
        resume = Path(os.environ[RESUME_ENV])
        print(f"\n{ENV}: paused at {point} {global_step} until {resume} exists", flush=True)
        deadline = time.monotonic() + PAUSE_LIMIT_SECONDS
        while not resume.exists():
            if time.monotonic() >= deadline:
                raise InjectedFault(f"{ENV}: {resume} did not appear within {PAUSE_LIMIT_SECONDS} s of the pause")
            time.sleep(0.1)
        return
    print(f"\n{ENV}: SIG{fault.action} at {point} {global_step}", flush=True)
    os.kill(os.getpid(), getattr(signal, f"SIG{fault.action}"))


class FaultHook(Hook):
    """First in the hook list, so a signal it sends is seen by the hooks after it at the same step. A chunk of
    steps ends at the fault's step, so it fires there whatever the chunking."""

    def __init__(self):
        self.fault = armed()

    def steps_until_boundary(self, position: Position) -> int | None:
        fault = self.fault
        if fault is None or fault.point != "steps" or fault.step <= position.global_step:
            return None
        return fault.step - position.global_step

    def after_steps(self, position: Position, logs: dict) -> None:
        fault_point("steps", position.global_step)
