"""Slurm's time-limit warning turned into a requeue (`strategy.slurm_requeue=true`).

With `sbatch --signal=USR1@<seconds> --requeue`, Slurm sends SIGUSR1 that long before the time limit; the
preemption guard treats it as a stop (save at the next step boundary, run KILLED), and the chief then asks
Slurm to put the job back in the queue. When it starts again, the same command resumes from that checkpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess

REQUEUE_SIGNAL = signal.SIGUSR1


def requeue() -> tuple[bool, str]:
    """`scontrol requeue $SLURM_JOB_ID`: (done, what happened, for the console and the run's tags)."""
    job = os.environ.get("SLURM_JOB_ID", "")
    if not job:
        return False, "no SLURM_JOB_ID: not running under Slurm, nothing requeued"
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return False, f"scontrol requeue {job} could not run: {err}"
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return False, f"scontrol requeue {job} failed: {said[0]}"
    return True, f"Slurm job {job} requeued: it resumes from this checkpoint when it starts again"
