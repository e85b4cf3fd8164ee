"""mode=doctor: deliberately broken setups, each named (cause and layer) with a fix that trains when applied.

The examination (`launcher.doctor.doctor`), the look inside the model (`launcher.doctor.inspect`) and the report
(`launcher.doctor.report`).
"""

from __future__ import annotations

import math

import broken_models
import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from support.config import compose

from launcher.doctor.diagnose import Facts, candidate_fixes, judge
from launcher.doctor.trials import Trial, render_overrides
from launcher.launch.training import execute

SMALL = ["model.hidden_units=[32]", "scaling.batch_size=32", "doctor.steps=30"]


def doctor(tmp_path, *overrides: str):
    """One in-process examination (the CLI's own path after Hydra): exit code, report text, run dir."""
    from launcher.doctor.doctor_mode import launch

    run_dir = tmp_path / "doctor"
    code = launch(
        compose(*SMALL, f"tracking.uri=sqlite:///{tmp_path}/m.db", *overrides), run_dir, tmp_path, " ".join(overrides)
    )
    return code, (run_dir / "doctor.md").read_text(), run_dir


def trains_with(tmp_path, overrides: list[str], recommended: str) -> dict:
    """Apply the recommended overrides in a real (untracked) training run; its final metrics."""
    outcome = execute(
        compose(
            *SMALL,
            *overrides,
            *recommended.split(),
            "tracking.enabled=false",
            "checkpoint.enabled=false",
            "checkpoint.export_model=false",
            "train.epochs=1",
        ),
        tmp_path / "applied",
        tmp_path,
    )
    assert outcome.error is None, outcome.error
    assert math.isfinite(outcome.result.final["loss"])
    return outcome.result.final


def recommendation(report: str) -> str:
    line = next(line for line in report.splitlines() if line.startswith("Verified by a trial:"))
    command = line.split("`")[1]
    return command.split("python -m launcher", 1)[1]


# ------------------------------------------------------------------ pure reasoning


def trial(losses, status="healthy") -> Trial:
    return Trial("t", {}, status=status, losses=list(losses))


def test_a_trial_diverges_against_the_baseline_or_against_its_own_start():
    baseline = trial([2.3] * 10 + [0.4] * 10)
    worse = trial([2.3] * 10 + [0.9] * 10)
    judge(worse, baseline, tolerance=0.5)
    assert worse.status == "diverged" and "baseline" in worse.detail
    rising = trial([2.0] * 10 + [40.0] * 10)
    judge(rising, None, tolerance=0.5)
    assert rising.status == "diverged" and "rose" in rising.detail
    close = trial([2.3] * 10 + [0.5] * 10)
    judge(close, baseline, tolerance=0.5)
    assert close.status == "healthy"


def test_fixes_follow_the_addition_that_broke_the_run():
    facts = Facts(
        precision="mixed",
        learning_rate=1.0,
        plan_lr=2.0,
        lr_rule="linear",
        replicas=2,
        batch_rule="per_replica",
        xla=True,
        clipnorm=0.0,
    )
    precision = candidate_fixes("precision", facts, ["amplify", "attenuate"], ["amplify"])
    assert precision[0].overrides == {"precision.float32_layers": ["amplify", "attenuate"]}
    assert [f.overrides for f in precision[1:]] == [{"precision.name": "bf16"}, {"precision.name": "fp32"}]
    strategy = candidate_fixes("strategy", facts, [], [])
    assert strategy[0].overrides == {"scaling.lr_rule": "none"} and "linear" in strategy[0].why
    assert strategy[1].overrides == {"optimizer.learning_rate": 0.5}
    assert candidate_fixes("xla", facts, [], [])[0].overrides == {"xla": "false"}
    assert (
        render_overrides({"precision.float32_layers": ["a", "b"], "xla": "false", "lr": 0.5})
        == "precision.float32_layers=[a,b] xla=false lr=0.5"
    )


# ------------------------------------------------------------------ broken setups


@pytest.mark.slow  # the doctor's runs, seconds of CPU in this process
def test_a_healthy_config_gets_a_clean_report_and_an_mlflow_run(tmp_path):
    code, report, run_dir = doctor(tmp_path, "precision=fp32", "xla=false")
    assert code == 0, report
    assert "**Verdict:** healthy" in report and "Nothing to change." in report
    assert "No layer exceeds float16's range" in report
    assert "| devices | 1 replica(s) on /cpu:0" in report
    assert "| batch | global 32 = 32 per replica x 1 | ok |" in report
    client = MlflowClient(f"sqlite:///{tmp_path}/m.db")
    (run,) = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])
    assert run.data.tags["launcher.mode"] == "doctor" and run.data.tags["doctor.addition"] == "none"
    assert {a.path for a in client.list_artifacts(run.info.run_id, "doctor")} >= {
        "doctor/doctor.md",
        "doctor/doctor_trials.json",
    }


@pytest.mark.slow  # the doctor's runs, seconds of CPU in this process
def test_a_layer_overflowing_float16_is_named_and_float32_layers_fix_it(tmp_path, monkeypatch):
    broken_models.use(monkeypatch, "overflow")
    code, report, run_dir = doctor(tmp_path, "precision=mixed", "xla=false")
    assert code == 3
    assert "broken by adding precision" in report
    assert "Step 1, forward: layer `amplify`" in report  # localised: the first non-finite value
    assert "| amplify | overflow (severe)" in report  # scanned: activations beyond 65504 in float32
    fix = recommendation(report)
    assert "precision.float32_layers=[amplify,attenuate]" in fix
    assert (run_dir / "doctor_loss_scale.png").stat().st_size > 1000
    trains_with(tmp_path, ["precision=mixed", "xla=false"], fix)


@pytest.mark.slow  # two replicas: a multi-device run
def test_a_learning_rate_that_diverges_only_with_two_replicas_names_the_strategy(tmp_path):
    # tanh MLP, plain SGD: lr 1.0 trains on one device; the linear rule doubles it for 2 replicas.
    setup = [
        "model.activation=tanh",
        "optimizer.name=sgd",
        "optimizer.momentum=0.0",
        "optimizer.learning_rate=1.0",
        "scaling=linear",
        "scaling.batch_size=32",
        "scaling.reference_batch=32",
        "scaling.warmup_epochs=0",
        "strategy=mirrored",
        "precision=fp32",
        "xla=false",
    ]
    code, report, _ = doctor(tmp_path, *setup)
    assert code == 3
    assert "broken by adding strategy" in report
    assert "+ strategy=mirrored (2 replicas)" in report and "**diverged**" in report
    assert "| batch | global 64 = 32 per replica x 2 | ok |" in report and "| drop_remainder | True |" in report
    fix = recommendation(report)
    assert "scaling.lr_rule=none" in fix
    trains_with(tmp_path, setup, fix)


@pytest.mark.slow  # the doctor's runs, seconds of CPU in this process
def test_nan_inputs_are_named_and_dropping_them_at_load_fixes_it(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 16)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    x[[3, 17, 250], 5] = np.nan
    np.savez(tmp_path / "data.npz", x=x, y=y)
    data = ["dataset=npz", f"dataset.path={tmp_path}/data.npz", "precision=fp32", "xla=false"]
    code, report, _ = doctor(tmp_path, *data)
    assert code == 3
    assert "Refused before training" in report and "NaN or inf in 3 example(s)" in report
    fix = recommendation(report)
    assert fix.strip().endswith("dataset.drop_nonfinite=true")
    trains_with(tmp_path, data, fix)


@pytest.mark.slow  # the doctor's runs, seconds of CPU in this process
def test_a_float16_output_is_named_and_the_launchers_float32_wrap_trains_like_the_baseline(tmp_path, monkeypatch):
    broken_models.use(monkeypatch, "float16_logits")
    code, report, _ = doctor(tmp_path, "precision=mixed", "xla=false")
    assert "| logits16 | output |" in report and "loss would compute in float16" in report
    assert "logits_float32" in report
    assert code == 0  # the launcher already applies the fix: the float16 trial trains like the baseline


@pytest.mark.slow  # the doctor's runs, seconds of CPU in this process
def test_an_injected_gradient_poison_is_localised_to_its_layer_in_the_backward_pass(tmp_path, monkeypatch):
    broken_models.use(monkeypatch, "poisoned")
    code, report, _ = doctor(tmp_path, "precision=mixed", "strategy=mirrored", "xla=true", "doctor.max_fixes=1")
    assert code == 3
    assert "backward: layer `poison`" in report
    assert "No candidate fix trained" in report  # the poison does not depend on any setting: nothing is invented


@pytest.mark.slow  # the doctor's runs, seconds of CPU in this process
def test_the_cli_names_an_exploding_learning_rate_the_baseline_s_exits_three_and_a_lower_rate_fixes_it(
    cli_here, tmp_path
):
    """Through the CLI's real entry (Hydra's main, the exit code) in this process: nothing here is about the process.
    The exploding rate is the float32 one-device baseline's own; the recommended lower rate trains when applied."""
    broken = [
        "model.activation=linear",
        "optimizer.name=sgd",
        "optimizer.momentum=0.0",
        "optimizer.learning_rate=2.0",
        "precision=fp32",
        "xla=false",
    ]
    done = cli_here("mode=doctor", *SMALL, *broken)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "Doctor: broken by the float32 one-device baseline itself" in done.stdout
    assert "recommended (verified): optimizer.learning_rate=0.2" in done.stdout
    assert "Traceback" not in done.stderr
    report = next(tmp_path.rglob("doctor.md")).read_text()
    assert "## Bisection" in report
    assert "broken by the float32 one-device baseline itself" in report
    fix = recommendation(report)
    assert "optimizer.learning_rate=0.2" in fix and "optimizer.learning_rate=2.0" not in fix  # replaced, not added
    trains_with(tmp_path, broken, fix)


def test_the_doctor_reads_a_refusals_fix_from_its_overrides_not_its_text():
    from launcher.config.errors import Violation
    from launcher.doctor.diagnose import refusal_fixes

    data = Violation(
        "dataset.x_key",
        "x",
        "finite inputs",
        "dataset.drop_nonfinite=true (drop them at load), or ...",
        overrides=("dataset.drop_nonfinite=true",),
    )
    bound = Violation(
        "optimizer.learning_rate",
        -1,
        "a finite number > 0",
        "optimizer.learning_rate=0.001",
        overrides=("optimizer.learning_rate=0.001",),
    )
    (fix,) = refusal_fixes([data, bound])
    assert fix.overrides == {"dataset.drop_nonfinite": True, "optimizer.learning_rate": 0.001}
    advice = Violation("model.builder", "x:y", "an importable builder", "dataset.drop_nonfinite=true is not it")
    assert refusal_fixes([data, advice]) == []  # the text names an override, but only a person can fix this one
