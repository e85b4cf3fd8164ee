"""`python -m launcher mode=doctor <overrides>`: examine the config, write the report, log it to MLflow.

Exit codes: 0 healthy; 3 a problem found (the report names it, with a verified fix when one
trained); 2 the doctor's own inputs refused (a ConfigError before any trial); 1 the doctor crashed.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from launcher.config.errors import ConfigError
from launcher.config.strategies import strategy_of
from launcher.doctor.doctor import examine
from launcher.doctor.report import PLOT_FILE, REPORT_FILE, console, markdown, plot_loss_scale, verdict
from launcher.doctor.trials import render_overrides
from launcher.launch.shell import run_in_shell
from launcher.outcome import EXIT_FINISHED, EXIT_PROBLEM_FOUND, FINISHED, OutcomeRecord
from launcher.plan.environment import probe
from launcher.tracking.tracker import open_run
from launcher.tracking.uri import check_reachable, redact

TRIALS_FILE = "doctor_trials.json"


def launch(node, run_dir: Path, launch_dir: Path, overrides: str = "") -> int:
    """One examination in `run_dir`, in the shell every mode runs in (lock, logs, exit codes); the exit code."""
    return run_in_shell(
        lambda: _examine(node, run_dir, launch_dir, overrides),
        run_dir,
        "doctor",
        bool(node.get("tf_logs", False)),
    )


def _examine(node, run_dir: Path, launch_dir: Path, overrides: str) -> OutcomeRecord:
    from launcher.config.schema import to_config
    from launcher.plan.resolve import wants_measurements

    config = to_config(node)
    strategy = strategy_of(config.strategy.kind)
    if not strategy.single_process:
        raise ConfigError.single(
            "strategy",
            strategy.name,
            "a single-process strategy: the doctor runs its trials in one process",
            "examine the same replicas on one machine: strategy=mirrored strategy.devices=<workers x devices>",
        )
    print(
        f"Doctor: examining `{overrides or 'the default config'}` with {config.doctor.steps}-step trials...", flush=True
    )
    exam = examine(config, probe(measure=wants_measurements(config)), overrides)
    run_dir.mkdir(parents=True, exist_ok=True)
    plot = plot_loss_scale(exam, run_dir / PLOT_FILE)
    report = run_dir / REPORT_FILE
    report.write_text(markdown(exam, plot))
    trials = [
        {k: v for k, v in asdict(t).items() if k != "plan"} | {"final_loss": t.final_loss}
        for t in exam.trials + [trial for _, trial in exam.fixes]
    ]
    (run_dir / TRIALS_FILE).write_text(json.dumps(trials, indent=1, default=str))
    print("\n" + console(exam), flush=True)
    print(f"\nReport: {report}", flush=True)
    if config.tracking.enabled:
        _log_to_mlflow(config, exam, run_dir, launch_dir, [report, run_dir / TRIALS_FILE, plot])
    return OutcomeRecord(
        status=FINISHED, exit_code=EXIT_FINISHED if exam.healthy else EXIT_PROBLEM_FOUND, mode="doctor"
    )


def _log_to_mlflow(config, exam, run_dir: Path, launch_dir: Path, files: list) -> None:
    """A run of its own ("doctor <name>") with the verdict as tags and the report as artifacts."""

    tr = config.tracking
    try:
        check_reachable(tr.uri)
    except ConfigError as err:
        print(f"MLflow not reachable ({err.violations[0].expected}); the report stays in {run_dir}", file=sys.stderr)
        return
    name = f"doctor {config.name or config.model.name}"
    tracker = open_run(tr.uri, launch_dir, tr.experiment, name, run_dir=run_dir, outage_wait=tr.outage_wait)
    tags = {
        "launcher.mode": "doctor",
        "doctor.verdict": verdict(exam),
        "doctor.overrides": exam.overrides,
        "doctor.addition": exam.addition or "none",
        "tracking.uri": redact(tr.uri),
    }
    if exam.culprit is not None:
        tags["doctor.layer"] = str(exam.culprit.layer)
        tags["doctor.step"] = str(exam.culprit.step)
    if exam.recommendation is not None:
        tags["doctor.recommendation"] = render_overrides(exam.recommendation.overrides)
    tracker.set_tags(tags)
    for trial_index, trial in enumerate(exam.trials):
        for step, scale in enumerate(trial.scales, start=1):
            tracker.log_metrics({f"doctor/trial{trial_index}_loss_scale": scale}, step=step)
    for path in files:
        if path is not None:
            tracker.log_artifact(path, "doctor")
    tracker.end("FINISHED")
    print(f"MLflow: {tracker.ui_hint}", flush=True)
