"""`train.max_restarts=N`: a failed training restarts by itself, from its newest checkpoint, in a fresh process.

The process the person started becomes a supervisor that never imports TensorFlow: it runs the training
as a child `python -m launcher` in the same run dir, and when the child fails in a way a restart may cure
(an exception while training, a process killed by the OOM killer or a crash signal) it waits
(`train.restart_backoff`, doubled each time) and runs it again; the child resumes from the newest
checkpoint into the same MLflow run, which gets a `restart.<k>.error` tag per restart. Never restarted: a
refusal (exit 2), a numerics stop, a checkpoint write that failed (the disk), and a signal from the person
(it reaches the child once, which saves and stops as it always does).

An attempt forked by a forkserver outlives that server (the OOM killer's pick): the supervisor waits for it to
end, never starting a second training in the run dir, and takes its status from its outcome record; one that died
with the server is a crash, restarted from the newest checkpoint in a new interpreter, as every later attempt is.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher import forkserver
from launcher.forkserver.requester import returncode_of
from launcher.outcome import EXIT_FAILED, FAILED, TRAINING_FAILURE, OutcomeRecord, exit_for_signal

RESTART_ENV = "LAUNCHER_RESTART"  # which restart a child is (0: the first attempt), set by the supervisor
REASON_ENV = "LAUNCHER_RESTART_REASON"  # why the attempt before it failed
MAX_BACKOFF = 600.0
# Signals that end a process without anyone asking it to stop: the OOM killer's SIGKILL, crashes.
CRASH_SIGNALS = (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL)


@dataclass(frozen=True)
class Attempt:
    """How one attempt ended: the exit code the launcher reports for it, the signal that killed its process (if
    one did), the outcome record it wrote (None if it died first) and whether the person signalled it."""

    exit_code: int
    outcome: OutcomeRecord | None = None
    signalled: bool = False
    killed_by: int | None = None

    @classmethod
    def of_process(cls, returncode: int, outcome: OutcomeRecord | None, signalled: bool) -> Attempt:
        """From `subprocess`'s return code (negative: killed by that signal, reported as 128 + signal)."""
        if returncode < 0:
            return cls(exit_for_signal(-returncode), outcome, signalled, killed_by=-returncode)
        return cls(returncode, outcome, signalled)


def why_restart(attempt: Attempt) -> str | None:
    """The failure a restart may cure, in words; None when this attempt must not be restarted."""
    if attempt.signalled or attempt.exit_code == 0:
        return None
    if attempt.killed_by is not None:
        sig = signal.Signals(attempt.killed_by)
        return f"the training process was killed by {sig.name}" if sig in CRASH_SIGNALS else None
    outcome = attempt.outcome
    failed_training = outcome is not None and outcome.status == FAILED and outcome.failure == TRAINING_FAILURE
    if attempt.exit_code == EXIT_FAILED and failed_training:
        return outcome.error or "training failed"
    return None


def backoff_seconds(base: float, restart: int) -> float:
    """Before restart k (1, 2, ...): base, 2 x base, 4 x base, ... at most MAX_BACKOFF."""
    return min(base * 2 ** (restart - 1), MAX_BACKOFF)


def attempt_number() -> int:
    """Which restart this process is (0 for a launch nobody restarted)."""
    value = os.environ.get(RESTART_ENV, "0")
    return int(value) if value.isdigit() else 0


def supervised() -> bool:
    """True in a process a supervisor started (it must not supervise again)."""
    return RESTART_ENV in os.environ


def supervise(run_attempt: Callable[[int, str | None], Attempt], max_restarts: int, backoff: float) -> int:
    """Run attempts until one needs no restart or the restarts are used up; the last attempt's exit code."""
    restart, reason = 0, None
    while True:
        attempt = run_attempt(restart, reason)
        why = why_restart(attempt)
        if why is None:
            return attempt.exit_code
        if restart >= max_restarts:
            print(
                f"\nNot restarting: train.max_restarts={max_restarts} restart(s) used. Last failure: {why}",
                file=sys.stderr,
                flush=True,
            )
            return attempt.exit_code
        restart, reason = restart + 1, why
        wait = backoff_seconds(backoff, restart)
        print(
            f"\nRestart {restart} of {max_restarts} in {wait:g} s ({why}): resuming from the newest checkpoint "
            "in a fresh process.",
            file=sys.stderr,
            flush=True,
        )
        time.sleep(wait)


def config_sources() -> list[str]:
    """The arguments besides the overrides that composed this launch's config: `--config-dir` and
    `hydra.searchpath` (a person's own conf, e.g. their task file). Hydra keeps them out of the task's overrides;
    without them a worker could not find what the launch was composed from."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    hydra_config = HydraConfig.get()
    dirs = [f"--config-dir={s.path}" for s in hydra_config.runtime.config_sources if s.provider == "command-line"]
    paths = [o for o in hydra_config.overrides.hydra if o.split("=", 1)[0].lstrip("+~") == "hydra.searchpath"]
    return [*dirs, *paths]


def child_attempts(overrides: list[str], run_dir: Path, launch_dir: Path) -> Callable[[int, str | None], Attempt]:
    """Attempts that each run the training as a child `python -m launcher` in `run_dir`."""
    kept = [o for o in overrides if not o.split("=", 1)[0].lstrip("+~").startswith("hydra.run.dir")]
    # The person's own conf (--config-dir, hydra.searchpath) too: Hydra keeps it out of the task's overrides.
    command = [sys.executable, "-m", "launcher", *config_sources(), *kept, f"hydra.run.dir={run_dir}"]
    cold: dict[str, str] = {}  # once a server died under an attempt, the next start where it could not die too

    def run(restart: int, reason: str | None) -> Attempt:
        env = {**os.environ, RESTART_ENV: str(restart), **cold}
        if reason:
            env[REASON_ENV] = reason[:2000]
        # Its own session: a terminal's Ctrl-C reaches this supervisor, which passes it on exactly once.
        child = forkserver.start(command, cwd=launch_dir, env=env, start_new_session=True, dies_with_parent=True)
        signalled = []

        def forward(signum, _frame):
            if signum == signal.SIGUSR1:  # Slurm's time-limit warning: the child saves (and requeues)
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signum)
                return
            if signalled:  # a second signal: no more waiting for a clean stop
                child.kill()
                return
            signalled.append(signum)
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

        watched = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
        previous = {sig: signal.signal(sig, forward) for sig in watched}
        try:
            code = child.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        outcome = OutcomeRecord.read(run_dir)
        if outcome is not None and outcome.pid != child.pid:  # an earlier attempt's: this one died first
            outcome = None
        if getattr(child, "server_lost", False):
            cold[forkserver.SOCKET_ENV] = "off"
            code = returncode_of(child, outcome)
        return Attempt.of_process(code, outcome, bool(signalled))

    return run
