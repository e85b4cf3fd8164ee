"""One sweep job: a fresh `python -m launcher` process, recorded as a child run whatever happens.

Job isolation: TensorFlow's devices, dtype policy and strategy cannot be reset
inside a process, and Hydra's basic launcher runs every job in the sweep's own
process. So in a multirun each job runs `python -m launcher <its overrides>` in a
fresh subprocess; the sweep process never imports TensorFlow. This holds for any
Hydra launcher (basic, joblib, submitit): the launcher decides where a job runs,
the job always gets a clean TensorFlow.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from launcher import forkserver
from launcher.config.tasks import objective
from launcher.files import JOB_FILE, STOP_FILE, SWEEP_FILE, read_json, write_json_atomic
from launcher.forkserver.requester import returncode_of
from launcher.outcome import FINISHED, KILLED, OutcomeRecord
from launcher.tracking.client import with_retry
from launcher.tracking.succession import TRIAL_TAG
from launcher.tracking.tracker import run_dir_run
from launcher.tracking.uri import redact


def swept_keys(sweep_overrides: list[str]) -> list[str]:
    """The keys a sweep varies (`precision=fp32,bf16` -> precision), via Hydra's own parser."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(sweep_overrides))
    return [o.get_key_element() for o in parsed if o.is_sweep_override()]


def job_name(overrides: list[str], keys: list[str] | None = None) -> str:
    """What differs between jobs, e.g. `precision=bf16,strategy=mirrored`."""
    chosen = [o for o in overrides if not o.startswith("hydra.")]
    if keys:
        chosen = [o for o in chosen if o.split("=", 1)[0] in keys] or chosen
    return ",".join(chosen) or "defaults"


# What a job came to, for the sweeper: trained to its end, pruned by its study, failed, or stopped unfinished
# (a fail-fast sweep skipped it or stopped it midway: the same sweep again continues it).
DONE, PRUNED, FAILED, STOPPED = "finished", "pruned", "failed", "stopped"


@dataclass(frozen=True)
class JobResult:
    """One job's result as the sweeper reads it: how it ended and its final metrics."""

    status: str
    metrics: dict[str, float] = field(default_factory=dict)
    job_dir: str = ""

    def value(self, name: str) -> float:
        """The final value of metric `name`; NaN when the job did not finish or never logged it."""
        found = self.metrics.get(name) if self.status in (DONE, PRUNED) else None
        return float(found) if found is not None else float("nan")

    @classmethod
    def of(cls, outcome: OutcomeRecord | None, job_dir: Path) -> JobResult:
        if outcome is None or outcome.status != FINISHED:
            return cls(STOPPED if outcome is not None and outcome.status == KILLED else FAILED, job_dir=str(job_dir))
        status = PRUNED if outcome.stop_reason == "pruned" else DONE
        return cls(status, {k: float(v) for k, v in outcome.metrics.items()}, str(job_dir))


def stopped_by(sweep_dir: Path) -> dict | None:
    """The failed job that stopped a fail-fast sweep, if one did."""
    return read_json(sweep_dir / STOP_FILE)


def run_job(node: DictConfig, hydra_config) -> JobResult:
    """Run one multirun job in a fresh Python process; record it as a child run whatever happens.

    Returns how it ended and its final metrics, for sweepers that optimise.
    """
    sweep_dir = Path(hydra_config.sweep.dir)
    state = _sweep_state(sweep_dir)
    overrides = [o for o in hydra_config.overrides.task if not o.startswith("hydra.")]
    name = job_name(overrides, state.get("swept_keys"))
    job_dir = _job_dir(sweep_dir, Path(hydra_config.runtime.output_dir), overrides)
    earlier = OutcomeRecord.read(job_dir)
    if earlier is not None and earlier.finished_training:  # not one its time budget stopped: that one goes on
        value = earlier.objective(objective(node))
        print(
            f"[sweep job {hydra_config.job.num}] {name}: finished in an earlier run of this sweep ({job_dir}), "
            f"skipped; {objective(node)}={value:.4g}",
            flush=True,
        )
        return JobResult.of(earlier, job_dir)
    if stop := stopped_by(sweep_dir):
        print(f"[sweep job {hydra_config.job.num}] {name}: not started, the sweep stopped at {stop['job']}", flush=True)
        return JobResult(STOPPED, job_dir=str(job_dir))
    resuming = (job_dir / JOB_FILE).exists()  # an earlier run of this sweep started it (killed or failed)
    write_json_atomic(job_dir / JOB_FILE, {"overrides": sorted(overrides)})
    extra = sweep_overrides(state, job_dir)
    if not node.tracking.run_name:
        extra.append(f"tracking.run_name='{name}'")
    if node.sweep.trial is not None and state.get("study"):  # an hparams_search trial: where it reports
        extra += [f"sweep.study={state['study']['storage']}", f"sweep.study_name={state['study']['name']}"]
    args = [sys.executable, "-m", "launcher", *overrides, *extra]
    print(f"[sweep job {hydra_config.job.num}] {name}" + (f" (again, in {job_dir})" if resuming else ""), flush=True)
    log_path = job_dir / "job.log"
    with open(log_path, "a" if resuming else "w") as log:
        shared = bool(state.get("shared")) and node.sweep.trial is not None
        returncode, stopped = _run_until_stopped(args, hydra_config.runtime.cwd, log, sweep_dir, job_dir, shared)
    outcome = OutcomeRecord.read(job_dir)
    if returncode != 0 and state.get("parent_run_id") and not (outcome and outcome.run_id):
        if own_run := _own_run(state, job_dir):  # the job's own run exists, its process is gone (killed): settle it
            _settle_killed_child(state, own_run, name, log_path, returncode, "KILLED" if stopped else "FAILED")
        elif not stopped:
            _record_failed_child(state, name, overrides, log_path, returncode)
    # A process a signal ended (-N: SIGKILL, the OOM killer) wrote nothing: an outcome here is an earlier attempt's.
    result = JobResult.of(outcome if returncode >= 0 else None, job_dir)
    if stopped and result.status not in (DONE, PRUNED):  # the sweep stopped it (maybe before it could save)
        result = JobResult(STOPPED, job_dir=str(job_dir))
    if result.status == FAILED and node.sweep.fail_fast and not stopped_by(sweep_dir):
        write_json_atomic(sweep_dir / STOP_FILE, {"job": name, "exit_code": returncode, "log": str(log_path)})
        print(f"[sweep job {hydra_config.job.num}] {name} failed: sweep.fail_fast=true stops the sweep", flush=True)
    status = {DONE: "ok", PRUNED: "pruned", STOPPED: "stopped (the sweep stopped)"}.get(
        result.status, f"failed (exit {returncode}, see {log_path})"
    )
    value = result.value(objective(node))
    print(f"[sweep job {hydra_config.job.num}] {name}: {status}; {objective(node)}={value:.4g}", flush=True)
    return result


def _run_until_stopped(
    args: list[str], cwd: str, log, sweep_dir: Path, job_dir: Path, dies_with_sweeper: bool = False
) -> tuple[int, bool]:
    """The job's process to its end (even when the forkserver that forked it dies first: its status is then
    its outcome record's), and whether the sweep stopped it: when a fail-fast sweep stops meanwhile, the job is
    asked to save and stop (SIGTERM: the preemption path), so the same sweep again resumes it. `dies_with_sweeper`:
    a shared study's trial, which another sweeper runs again once this one stops beating, never outlives it."""
    process = forkserver.start(
        args,
        cwd=cwd,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(os.environ),
        dies_with_parent=dies_with_sweeper,
    )
    signalled = False
    while True:
        try:
            process.wait(timeout=0.5)
            return returncode_of(process, OutcomeRecord.read(job_dir)), signalled
        except subprocess.TimeoutExpired:
            if not signalled and stopped_by(sweep_dir):
                process.send_signal(signal.SIGTERM)
                signalled = True


def _job_dir(sweep_dir: Path, given: Path, overrides: list[str]) -> Path:
    """Where this job runs: the dir an earlier run of this sweep gave the same overrides (its checkpoints
    and MLflow child run continue), else Hydra's, or a fresh one when Hydra's holds another job."""
    wanted = sorted(overrides)
    for found in sorted(sweep_dir.glob(f"*/{JOB_FILE}")):
        if read_json(found, {}).get("overrides") == wanted:
            return found.parent
    there = read_json(given / JOB_FILE)
    if there is not None and _but_trial(there.get("overrides") or []) == _but_trial(wanted):
        return given  # a search's trial queued again (its sweeper died) runs where its first run did
    if there is not None:  # the sweep's values changed: this number is another job now
        given = given.with_name(f"{given.name}-{hashlib.sha1(' '.join(wanted).encode()).hexdigest()[:8]}")
    given.mkdir(parents=True, exist_ok=True)
    return given


def sweep_overrides(state: dict, job_dir: Path) -> list[str]:
    """What the sweep tells each job: its run dir, the sweep's id and parent run, the keys the jobs differ by. The
    ids are quoted: Hydra reads an unquoted `199906e09544` (a hex id, by chance) as a number, `inf`."""
    extra = [f"hydra.run.dir={job_dir}", f"tracking.sweep_id='{state.get('sweep_id', '')}'"]
    if state.get("swept_keys"):  # the keys the jobs differ by, for the Plan's warnings (config: sweep.varies)
        extra.append(f"sweep.varies=[{','.join(state['swept_keys'])}]")
    if state.get("parent_run_id"):
        extra += [f"tracking.parent_run_id='{state['parent_run_id']}'", f"tracking.uri={state['uri']}"]
    return extra


def _but_trial(overrides: list[str]) -> list[str]:
    return [o for o in overrides if not o.startswith("sweep.trial=")]


def _sweep_state(sweep_dir: Path) -> dict:
    for _ in range(50):  # parallel launchers may start a job a moment before the file lands
        state = read_json(sweep_dir / SWEEP_FILE)
        if state is not None:
            return state
        time.sleep(0.1)
    return {}


def _record_failed_child(state: dict, name: str, overrides: list[str], log_path: Path, code: int) -> None:
    """A job refused before training (ConfigError) still shows in MLflow, as a failed child with its reason.

    Parallel jobs share one SQLite store: every write retries a locked database."""
    from mlflow.entities import Param, RunTag
    from mlflow.tracking import MlflowClient

    overrides = [_shown(o) for o in overrides]
    client = MlflowClient(state["uri"])
    parent = with_retry(client.get_run, state["parent_run_id"])
    text = log_path.read_text()[-4000:]
    reason = _error_reason(text)
    run = with_retry(
        client.create_run,
        parent.info.experiment_id,
        run_name=name,
        tags={
            "mlflow.parentRunId": state["parent_run_id"],
            "sweep_id": state["sweep_id"],
            "sweep.overrides": ",".join(overrides),
            "error": reason[:4900],
            "exit_code": str(code),
        },
    )
    run_id = run.info.run_id
    with_retry(
        client.log_batch,
        run_id,
        params=[Param(o.split("=", 1)[0], o.split("=", 1)[-1]) for o in overrides],
        tags=[RunTag("sweep.role", "child")],
    )
    with_retry(client.log_artifact, run_id, str(log_path))
    with_retry(client.set_terminated, run_id, status="FAILED")


def _own_run(state: dict, job_dir: Path) -> str | None:
    """The MLflow run the job's launch made, even one it was killed before recording."""
    from mlflow.tracking import MlflowClient

    return run_dir_run(MlflowClient(state["uri"]), job_dir)


def _settle_killed_child(state: dict, run_id: str, name: str, log_path: Path, code: int, status: str) -> None:
    """A job whose process died without ending its MLflow run (a signal, the OOM killer): the run is FAILED
    (KILLED when a fail-fast sweep stopped it) with the exit code and the tags of a child (it may have died before
    setting them), not left RUNNING; a re-run of the sweep continues it."""
    from mlflow.entities import RunTag
    from mlflow.tracking import MlflowClient

    client = MlflowClient(state["uri"])
    reason = _error_reason(log_path.read_text()[-4000:])
    tags = {
        "error": f"the job's process ended with exit code {code}\n{reason}"[:4900],
        "exit_code": str(code),
        "sweep.role": "child",
        "sweep_id": state["sweep_id"],
        "sweep.overrides": name,
    }
    with_retry(client.log_batch, run_id, tags=[RunTag(k, v) for k, v in tags.items()])
    with_retry(client.set_terminated, run_id, status=status)


def settle_abandoned(sweep_dir: Path, numbers: list[int]) -> None:
    """Search trials failed because their sweeper stopped beating (killed, machine gone): child runs they left
    RUNNING are FAILED with the reason, as their retries run them again."""
    from mlflow.entities import RunTag
    from mlflow.tracking import MlflowClient

    state = read_json(sweep_dir / SWEEP_FILE, {})
    if not state.get("parent_run_id") or not numbers:
        return
    client = MlflowClient(state["uri"])
    parent = with_retry(client.get_run, state["parent_run_id"])
    running = with_retry(
        client.search_runs,
        [parent.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{state['parent_run_id']}' and attributes.status = 'RUNNING'",
    )
    abandoned = {str(n) for n in numbers}
    for run in running:
        # A tag from the run's creation (one killed before logging its params has only that); a param before.
        trial = run.data.tags.get(TRIAL_TAG) or run.data.params.get(TRIAL_TAG)
        if trial not in abandoned:
            continue
        reason = "its sweeper stopped beating (killed, or its machine gone): the search runs the trial again"
        with_retry(client.log_batch, run.info.run_id, tags=[RunTag("error", reason), RunTag("sweep.retried", "true")])
        with_retry(client.set_terminated, run.info.run_id, status="FAILED")
        print(f"Trial {trial}: {reason}; its run {run.info.run_id} is FAILED.", flush=True)


def _shown(override: str) -> str:
    """An override as MLflow may show it: a tracking URI without its credentials."""

    key, _, value = override.partition("=")
    return f"{key}={redact(value)}" if key.lstrip("+~") == "tracking.uri" else override


def _error_reason(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith(("Invalid configuration", "Error", "In 'config'")):
            return "\n".join(lines[i : i + 12])
    return "\n".join(lines[-12:])
