"""`strategy=multi_worker strategy.local_workers=N`: a multi-worker job on this machine, from one command.

This process never imports TensorFlow: it picks N free 127.0.0.1 ports, starts N `python -m launcher`
workers with the same overrides plus `strategy.workers` / `strategy.task_index`, streams their output
prefixed `[worker i]` (and into `workers/worker<i>.log`), and waits. Worker 0, the chief, runs in the
job's run dir exactly as a single process would (MLflow run, checkpoints, model); the others run in
`workers/worker<i>/` and save into temporary directories (see `launch.checkpointer`).

- The first worker to fail stops the job: the others get SIGTERM, then SIGKILL after `GRACE_SECONDS`
  (they are usually blocked in a collective with the dead peer), and the exit code and message name
  the worker and its last lines.
- SIGINT / SIGTERM to this process reach every worker once; they agree on a step boundary, save and
  stop (exit 128 + signal), as a single process does. A second signal kills them. SIGUSR1 (Slurm's time-limit
  warning, `strategy.slurm_requeue`) is passed on once too: the workers save, the chief requeues the job.
- Re-running the same command resumes every worker from the chief's last checkpoint.
- A worker outlives the forkserver that forked it (the OOM killer's pick): it is watched to its end, its exit
  taken from its outcome record, and a restart of the job starts its workers as new interpreters.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from launcher import forkserver
from launcher.config.strategies import WorkerStart, strategy_of
from launcher.forkserver.requester import returncode_of
from launcher.outcome import OutcomeRecord
from launcher.supervise.restarts import Attempt, config_sources

GRACE_SECONDS = 5.0
TAIL_LINES = 25
# Overrides this launcher sets for each worker (the user's own are dropped).
OWN_KEYS = ("strategy.local_workers", "strategy.workers", "strategy.task_index", "hydra.run.dir")


def local_worker_count(strategy) -> int:
    """The workers this command starts on this machine: `strategy.local_workers` under a strategy that runs one
    process per worker (`WorkerStart.per_worker` in `launcher.config.strategies`), else 0 (this process trains)."""
    if strategy_of(strategy.kind).workers is not WorkerStart.per_worker:
        return 0
    return max(int(getattr(strategy, "local_workers", 0)), 0)


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def worker_commands(overrides: list[str], count: int, run_dir: Path) -> list[list[str]]:
    """Each worker's command line: the user's overrides, the config sources they were composed with, and where this
    worker is in the cluster (each worker places itself in the run dir: see `launch.worker_run_dir`)."""
    kept = [*config_sources(), *(o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in OWN_KEYS)]
    addresses = ",".join(f"127.0.0.1:{port}" for port in free_ports(count))
    # Only the chief writes Hydra's .hydra/ folder into the shared run dir.
    return [
        [
            sys.executable,
            "-m",
            "launcher",
            *kept,
            "strategy.local_workers=0",
            f"strategy.workers=[{addresses}]",
            f"strategy.task_index={index}",
            f"hydra.run.dir={run_dir}",
            *(["hydra.output_subdir=null"] * (index > 0)),
        ]
        for index in range(count)
    ]


class Worker:
    """One worker process, its output streamed with a prefix and kept in a log file."""

    returncode: int | None = None  # once it ended (`poll`)

    def __init__(self, index: int, command: list[str], log_path: Path, cwd: Path, outcome_dir: Path):
        self.index = index
        self.outcome_dir = outcome_dir  # where it writes its outcome record (`launch.worker_run_dir`)
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(log_path, "a")  # noqa: SIM115 - closed by the streaming thread
        env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        env["PYTHONUNBUFFERED"] = "1"
        # Its own session: a terminal's Ctrl-C reaches this launcher, which forwards it exactly once.
        self.process = forkserver.start(
            command,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            dies_with_parent=True,
        )
        self.thread = threading.Thread(target=self._stream, name=f"worker{index}-output", daemon=True)

    def _stream(self) -> None:
        with self.log:
            for line in self.process.stdout:
                self.tail.append(line.rstrip())
                self.log.write(line)
                print(f"[worker {self.index}] {line}", end="", flush=True)

    def poll(self) -> int | None:
        """Its return code once it ended; its outcome record's when its forkserver died before reporting it."""
        if self.returncode is None and (code := self.process.poll()) is not None:
            lost = getattr(self.process, "server_lost", False)
            self.returncode = returncode_of(self.process, OutcomeRecord.read(self.outcome_dir)) if lost else code
        return self.returncode

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signum)

    def describe_exit(self) -> str:
        code = self.poll()
        if code is not None and code < 0:
            return f"was killed by {signal.Signals(-code).name}"
        return f"exited with code {code}"


def local_workers_attempt(overrides: list[str], count: int, run_dir: Path, launch_dir: Path) -> Attempt:
    """Start, stream and watch the workers; how the job ended: the failing worker's exit code and outcome record
    (0 and the chief's when all finish), and whether the person signalled it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    commands = worker_commands(overrides, count, run_dir)
    print(f"Starting {count} local workers (multi-worker job in {run_dir}; logs in {run_dir / 'workers'})", flush=True)
    workers = [
        Worker(i, cmd, run_dir / "workers" / f"worker{i}.log", launch_dir, _outcome_dir(run_dir, i))
        for i, cmd in enumerate(commands)
    ]
    for worker in workers:  # after every fork: preexec_fn and threads do not mix
        worker.thread.start()
    job = _Job(workers)
    try:
        with job.forwarding():
            code = job.wait()
    finally:
        for worker in workers:
            worker.thread.join(timeout=5)
    if code == 0:
        _report_weights(run_dir, count)
    if any(getattr(w.process, "server_lost", False) for w in workers):  # a restart: where no server can die
        os.environ[forkserver.SOCKET_ENV] = "off"
    failed = job.failed
    watched = failed or workers[0]
    outcome = OutcomeRecord.read(watched.outcome_dir)
    if outcome is not None and outcome.pid != watched.process.pid:  # an earlier launch's record: it died first
        outcome = None
    raw = failed.poll() if failed is not None else None  # negative when a signal killed it
    killed_by = -raw if raw is not None and raw < 0 else None
    return Attempt(code, outcome, job.signalled is not None, killed_by)


def blamed(failures: list[tuple[Worker, int]]) -> Worker | None:
    """Of the workers found failed in one look (worker, return code), the one the job's failure is named after: one
    killed by a signal before any that exited with an error (a peer killed mid-collective fails the others a moment
    later: their errors follow from its death), then the lowest index."""
    return min(failures, key=lambda failure: (failure[1] >= 0, failure[0].index))[0] if failures else None


class _Job:
    # Passed on to every worker: a person's stop, and Slurm's time-limit warning (SIGUSR1), whose default action
    # would end this launcher, and the workers that die with it, before they saved.
    FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)

    def __init__(self, workers: list[Worker]):
        self.workers = workers
        self.signalled: int | None = None
        self.failed: Worker | None = None  # the first worker to fail, when one did

    @contextlib.contextmanager
    def forwarding(self):
        """While the job runs, the signals this launcher gets go to its workers (`forward`)."""
        previous = {sig: signal.signal(sig, self.forward) for sig in self.FORWARDED}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def forward(self, signum, _frame) -> None:
        if signum == signal.SIGUSR1 and self.signalled == signum:  # Slurm's warning again: the stop is on
            return
        if self.signalled is not None:  # a second signal: no more waiting for a clean stop
            self._kill_all()
            return
        self.signalled = signum
        print(
            f"\nSignal {signal.Signals(signum).name}: passed to every worker; they save at the next step "
            "boundary and stop.",
            file=sys.stderr,
            flush=True,
        )
        for worker in self.workers:
            worker.signal(signum)

    def wait(self) -> int:
        while True:
            codes = [w.poll() for w in self.workers]
            failed = blamed([(w, c) for w, c in zip(self.workers, codes, strict=True) if c not in (None, 0)])
            if failed is not None and self.signalled is None:
                return self._fail(failed)
            if all(c is not None for c in codes):
                if self.signalled is not None:
                    return 128 + self.signalled
                return 0
            time.sleep(0.1)

    def _fail(self, failed: Worker) -> int:
        self.failed = failed
        # The workers running when the failure was seen: a peer of a killed worker may exit on its own while its
        # last lines are read, and it was still running when the job stopped.
        others = [w for w in self.workers if w is not failed and w.process.poll() is None]
        # A peer can also end on its own before the failure is seen (its collective with the dead worker failed).
        ended = [w for w in self.workers if w is not failed and w not in others]
        failed.thread.join(timeout=2)  # its last lines
        for worker in others:
            worker.signal(signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        while any(w.process.poll() is None for w in others) and time.monotonic() < deadline:
            time.sleep(0.1)
        self._kill_all()
        last = "\n".join(f"    {line}" for line in failed.tail if line.strip())
        code = failed.poll()
        after = (
            "Its configuration was refused (above): fix it and run the command again."
            if code == 2
            else "Re-run the same command to resume every worker from the chief's last checkpoint."
        )
        fates = [f"the other {len(others)} running worker(s) were stopped"] if others else []
        fates += [f"worker {w.index} had already ended: it {w.describe_exit()}" for w in ended]
        print(
            f"\nWorker {failed.index} (pid {failed.process.pid}) {failed.describe_exit()}"
            f"{''.join(f'; {fate}' for fate in fates)}.\nIts last lines:\n{last}\n{after}",
            file=sys.stderr,
            flush=True,
        )
        return code if code and code > 0 else 1

    def _kill_all(self) -> None:
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.signal(signal.SIGKILL)
        for worker in self.workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.process.wait(timeout=10)


def _outcome_dir(run_dir: Path, index: int) -> Path:
    return run_dir if index == 0 else run_dir / "workers" / f"worker{index}"


def _report_weights(run_dir: Path, count: int) -> None:
    dirs = [_outcome_dir(run_dir, i) for i in range(count)]
    records = [OutcomeRecord.read(d) for d in dirs]
    digests = [r.weights_sha256 if r else None for r in records]
    if None not in digests and len(set(digests)) == 1:
        print(f"All {count} workers finished with identical weights (sha256 {digests[0][:12]}).", flush=True)
