"""The examination: environment checks, bisection, localisation, scan, verified recommendation.

    float32, one device  ->  + precision  ->  + strategy (its replicas)  ->  + XLA   (= the config)

Each arrow is one short trial. The first trial that crashes, goes non-finite, collapses or
diverges from the baseline names the addition; a non-finite one is replayed to the step before it
and that step is run layer by layer; the float32 model's activations are scanned for float16
overflow; candidate fixes are run until one trains, and that one is the recommendation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from launcher.config.errors import ConfigError
from launcher.config.precisions import baseline
from launcher.contract import Position
from launcher.doctor.diagnose import Facts, Fix, candidate_fixes, first_failure, judge, refusal_fixes
from launcher.doctor.inspect import (
    Culprit,
    Risk,
    activation_ranges,
    consumers,
    first_nonfinite,
    output_risk,
    scan,
)
from launcher.doctor.trials import Trial, render_overrides, run_trial
from launcher.launch.tuning import cached_summary
from launcher.train import runtime

ADDITIONS = ("baseline", "precision", "strategy", "xla")


@dataclass
class Examination:
    overrides: str  # the command line examined
    checks: list[tuple[str, str, str]] = field(default_factory=list)  # (check, what was found, verdict)
    trials: list[Trial] = field(default_factory=list)
    addition: str | None = None  # what broke it: baseline, precision, strategy, xla, config; None: healthy
    culprit: Culprit | None = None
    risks: list[Risk] = field(default_factory=list)
    fixes: list[tuple[Fix, Trial]] = field(default_factory=list)
    recommendation: Fix | None = None
    seconds: float = 0.0

    @property
    def healthy(self) -> bool:
        return self.addition is None


def examine(config, env, overrides: str) -> Examination:
    """Run the whole examination of `config` (typed) on this machine."""
    from launcher.launch.review import review

    started = time.perf_counter()
    exam = Examination(overrides)
    steps = config.doctor.steps
    # The devices of the config as asked (a process splits its CPU once): every trial shares them.
    checked = review(config, env, lambda p: runtime.split_cpu(p.strategy.logical_cpus))
    plan, source, problems = checked.plan, checked.source, checked.problems
    if problems:
        exam.addition = "config"
        exam.checks.append(("config and data", "refused", str(ConfigError(problems))))
        _verify(exam, config, refusal_fixes(problems), None, steps, env)
        exam.seconds = time.perf_counter() - started
        return exam
    exam.checks = environment_checks(plan, env)
    exam.checks.append(("step tuning", cached_summary(config, env), "tune=auto's timing of this config, if any"))
    exam.trials, trained = _bisect(config, plan, steps, env)  # each judged against the baseline
    baseline = exam.trials[0]
    failing = first_failure(exam.trials)
    baseline_model = trained.get("baseline")
    if baseline_model is not None:
        engine = baseline_model.engine
        ranges = activation_ranges(engine.model, engine.batch_at(Position())[0])
        exam.risks = scan(engine.model, ranges)
    if plan.precision.mixed:
        from launcher.train.registry import MODELS

        risk = output_risk(lambda: MODELS.get(config.model.name).build(config.model, source), plan.precision.policy)
        exam.risks += [risk] if risk else []
    if failing is None:
        exam.seconds = time.perf_counter() - started
        return exam
    exam.addition = next(a for a in ADDITIONS if a in failing.name) if failing is not baseline else "baseline"
    culprit_layers: list[str] = []
    if failing.stop_step is not None:
        exam.culprit, culprit_layers = _localise(config, failing, steps, env)
    overflow = _overflow_layers(exam.risks)
    facts = Facts(
        precision=plan.precision.name,
        learning_rate=config.optimizer.learning_rate,
        plan_lr=plan.learning_rate.peak,
        lr_rule=config.scaling.lr_rule.value,
        replicas=plan.strategy.replicas,
        batch_rule=config.scaling.batch_rule.value,
        xla=bool(plan.step.xla),
        clipnorm=config.optimizer.clipnorm,
    )
    _verify(exam, config, candidate_fixes(exam.addition, facts, overflow, culprit_layers), baseline, steps, env)
    exam.seconds = time.perf_counter() - started
    return exam


def _verify(exam: Examination, config, fixes: list[Fix], baseline, steps: int, env) -> None:
    """Run candidate fixes on the whole config; the first that trains is the recommendation."""
    for fix in fixes[: config.doctor.max_fixes]:
        trial, _ = run_trial(config, f"fix: {render_overrides(fix.overrides)}", fix.overrides, steps, env)
        judge(trial, baseline, config.doctor.tolerance)
        exam.fixes.append((fix, trial))
        if trial.status == "healthy":
            exam.recommendation = fix
            return


def _bisect(config, plan, steps: int, env) -> tuple[list[Trial], dict]:
    """The cumulative trials, each adding one feature of the config; stops at the first broken one."""
    # The user's float32 layers belong to the precision step (the baseline has no float16 to keep them from).
    unset = {"precision.float32_layers": []} if config.precision.float32_layers else {}
    stages: list[tuple[str, dict[str, Any]]] = [
        (
            "float32, one device (baseline)",
            {"precision.name": baseline().name, **unset, "strategy.kind": "default", "xla": "false"},
        )
    ]
    if plan.precision.mixed:
        stages.append(
            (
                f"+ precision={plan.precision.name}",
                {"precision.name": plan.precision.name, "strategy.kind": "default", "xla": "false"},
            )
        )
    if plan.strategy.kind != "default":
        stages.append(
            (
                f"+ strategy={plan.strategy.kind} ({plan.strategy.replicas} replicas)",
                {"precision.name": plan.precision.name, "xla": "false"},
            )
        )
    if plan.step.xla:
        stages.append(("+ xla", {"precision.name": plan.precision.name, "xla": "true"}))
    trials, trained = [], {}
    for name, overrides in stages:
        trial, result = run_trial(config, name, overrides, steps, env)
        trials.append(trial)
        if result is not None and not trials[:-1]:
            trained["baseline"] = result
        judge(trial, trials[0], config.doctor.tolerance)
        if trial.status != "healthy":
            break
    return trials, trained


def _localise(config, failing: Trial, steps: int, env) -> tuple[Culprit, list[str]]:
    """Replay the failing trial to the step before its failure, then run that step layer by layer."""
    from launcher.train.loss_scale import current_scale

    step = failing.stop_step
    applied = failing.first_applied_nonfinite_step
    if failing.stop_kind == "nonfinite_loss" and applied is not None and applied < step:
        # The loss shows a non-finite update a step or more after it: the step whose gradients broke is where to look
        # (replaying the step the loss went NaN only finds weights that are NaN already, a forward symptom).
        step = applied
    elif failing.stop_kind not in ("nonfinite_loss", "nonfinite_grads"):
        # A collapse: the first skipped step of the final streak is where the gradients broke.
        streak_start = len(failing.skips)
        while streak_start > 0 and failing.skips[streak_start - 1]:
            streak_start -= 1
        step = streak_start + 1
    replay, trained = run_trial(config, failing.name + " (replay)", failing.overrides, steps, env, stop_after=step - 1)
    if trained is None:
        return Culprit(step, "unknown", None, f"the replay did not train: {replay.detail[:200]}"), []
    engine = trained.engine
    x, y, *weight = engine.batch_at(trained.position)  # (x, y) or (x, y, sample_weight)
    scale = current_scale(engine.optimizer) or 1.0
    culprit = first_nonfinite(engine.model, engine.loss_fn, x, y, scale, step, *weight)
    if culprit.layer is None or culprit.layer == "loss":
        return culprit, []
    return culprit, [culprit.layer, *consumers(engine.model, culprit.layer)]


def _overflow_layers(risks: list[Risk]) -> list[str]:
    layers: list[str] = []
    for risk in risks:
        if risk.kind == "overflow":
            layers += [name for name in risk.layers if name not in layers]
    return layers


def environment_checks(plan, env) -> list[tuple[str, str, str]]:
    """What people check first when MirroredStrategy misbehaves: devices, batch split, remainder."""
    replicas = plan.strategy.replicas
    devices = plan.strategy.devices
    checks = [
        (
            "devices",
            f"{replicas} replica(s) on {', '.join(map(str, devices)) or 'the default device'}; "
            f"visible: {env.describe_devices()}",
            "ok" if len(devices) >= replicas or replicas == 1 else "mismatch",
        )
    ]
    per_replica, global_batch = plan.batch.per_replica, plan.batch.global_batch
    verdict = "ok" if per_replica * replicas == global_batch else "mismatch"
    small = " (small per-replica batches make batch statistics noisy)" if per_replica < 8 else ""
    checks.append(("batch", f"global {global_batch} = {per_replica} per replica x {replicas}{small}", verdict))
    checks.append(("drop_remainder", str(plan.batch.drop_remainder), plan.batch.reason("drop_remainder")))
    checks.append(("steps", f"{plan.schedule.steps_per_epoch} per epoch", "ok"))
    checks += [("plan warning", warning, "warn") for warning in plan.warnings]
    return checks
