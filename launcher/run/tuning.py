"""`tune=auto`: time the steps `precision=auto` / `xla=auto` allow on this model and machine, use the fastest.

A matmul probe cannot know how a convnet or a model with small layers runs; timing the real step can. Each
candidate (a precision and an XLA setting the resolver accepts for this config) trains two short epochs in a
child process of its own (the launch's own TensorFlow runtime is untouched: its devices and policy are set once),
and its second epoch's examples/s is its rate. The fastest is cached per signature (model, data, batch, strategy,
optimizer, steps per call, machine, TensorFlow version) in `$LAUNCHER_CACHE/step_tuning.json` under a file lock;
later launches with the same signature read it (`tune=force` times again). The resolver decides by the result
(`Environment.tuned`) and the Plan quotes the table (`tune`). Multi-worker jobs never tune: every worker must run
the same step, and timing on each could disagree; they decide by the matmul rates' rule.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from launcher.config.optimizers import xla_breaks
from launcher.config.schema import Config, PrecisionName, StrategyKind, as_dict
from launcher.files import OUTCOME_FILE, read_json, write_json_atomic
from launcher.plan.decisions import TunePlan
from launcher.plan.environment import Environment, TunedStep
from launcher.plan.hardware import age_text, cache_file, machine_key
from launcher.plan.resolve import resolve_all
from launcher.plan.rules.step import TUNE_CHOICES

TIMEOUT_SEC = 120  # one candidate's child process
# Steps timed within this of the fastest are a tie (one short sample each): the rate rule's choice is kept then.
TIE = 0.05
# What the candidates' own launches leave out or pin: they time the step, nothing else.
OWNED_KEYS = (
    "precision",
    "xla",
    "tune",
    "name",
    "explain",
    "mode",
    "hydra.run.dir",
    "train.epochs",
    "train.max_steps_per_epoch",
    "train.max_validation_steps",
    "train.max_restarts",
    "train.test_at_end",
    "tracking.enabled",
    "checkpoint.enabled",
)


@dataclass(frozen=True)
class Candidate:
    precision: str
    xla: bool

    @property
    def label(self) -> str:
        return f"{self.precision} {'xla' if self.xla else 'graph'}"

    def overrides(self) -> list[str]:
        return [f"precision={self.precision}", f"xla={'true' if self.xla else 'false'}"]


@dataclass(frozen=True)
class Timing:
    candidate: Candidate
    examples_per_sec: float | None  # None: it failed or went non-finite
    note: str = ""


def command_line() -> list[str]:
    """This launch's overrides, as Hydra parsed them (the candidates' launches repeat them); [] outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:  # not started by Hydra (a test calling the launch directly)
        return []


def candidates(config: Config, env: Environment) -> tuple[list[Candidate], list[str]]:
    """The steps auto may choose between for this config: every precision precision=auto allows (fp32; bf16 where
    the hardware has bfloat16 instructions; float16 on GPUs, the only hardware with a float16 fast path: both
    change the numerics, which precision=auto accepts) times XLA on and off when xla=auto (off only for an
    optimizer XLA breaks); fixed where the person fixed them. A candidate the resolver refuses is left out, with
    why."""
    auto_precision = config.precision.name == PrecisionName.auto
    auto_xla = str(config.xla).strip().lower() == "auto"
    kept, left_out = [], []
    if auto_precision:
        native_bf16 = bool(env.gpus) or env.has_amx or env.has_avx512_bf16
        precisions = ["fp32", *(["bf16"] if native_bf16 else []), *(["mixed"] if env.gpus else [])]
        if not native_bf16:
            left_out.append("bf16: this CPU has no bfloat16 instructions (emulated: always slower)")
    else:
        precisions = [config.precision.name.value]
    breaks = xla_breaks(config.optimizer.name)
    if auto_xla and breaks:
        left_out.append(f"xla: optimizer.name={config.optimizer.name}: {breaks}")
    xlas = ([False] if breaks else [False, True]) if auto_xla else [str(config.xla).strip().lower() == "true"]
    for precision in precisions:
        for xla in xlas:
            candidate = Candidate(precision, xla)
            trial = copy.deepcopy(config)
            trial.precision.name = PrecisionName(precision)
            trial.xla = "true" if xla else "false"
            _, problems = resolve_all(trial, replace(env, tuned=None))
            if problems:
                left_out.append(f"{candidate.label}: {problems[0].key}={problems[0].value!r} refused")
            else:
                kept.append(candidate)
    return kept, left_out


def rule(config: Config, env: Environment) -> Candidate:
    """What the matmul rates' rule picks without timing."""
    plan, _ = resolve_all(config, replace(env, tuned=None))
    return Candidate(plan.precision.name, plan.step.xla)


def signature(config: Config, env: Environment) -> str:
    """What a step's speed depends on: the model, the data, the batch, the strategy, the optimizer, steps per
    call, the machine and TensorFlow. A changed batch or model width is another signature; a rerun is not."""
    settings = as_dict(config)
    parts = {
        "model": settings["model"],
        "dataset": {k: v for k, v in settings["dataset"].items() if k not in ("shuffle_seed",)},
        "scaling": settings["scaling"],
        "strategy": settings["strategy"],
        "optimizer": {k: settings["optimizer"][k] for k in ("name", "update")},
        "steps_per_execution": settings["train"]["steps_per_execution"],
        "task": settings["task"],
        "machine": machine_key(),
        "tensorflow": env.tf_version,
    }
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def tuning_file() -> Path:
    return cache_file().with_name("step_tuning.json")


def decide(
    config: Config, env: Environment, overrides: list[str], launch_dir: Path
) -> tuple[Environment, TunePlan | None]:
    """The environment with the tuned step (or as it was), and the Plan's record of how it was decided. An unknown
    `tune` value tunes nothing here; the resolver refuses it with the config's other problems."""
    mode = str(config.tune)
    if mode not in TUNE_CHOICES or mode == "off":
        return env, None
    if config.strategy.kind == StrategyKind.multi_worker:
        why = "multi-worker jobs never tune: every worker runs the step the matmul rates' rule picks, the same on each"
        return env, TunePlan.of(tune=("not tuned", why))
    found, left_out = candidates(config, env)
    if len(found) < 2:
        return env, TunePlan.of(tune=("not tuned", f"one candidate step ({_listed(found)}): nothing to choose"))
    key = signature(config, env)
    cached = read_json(tuning_file(), {}).get(key)
    if cached and mode != "force":
        return _chosen(env, cached, f"cached {age_text(time.time() - cached['measured_at'])} ago (signature {key})")
    if config.explain:
        would = f"tune={mode}: a launch would time {len(found)} candidate steps ({_listed(found)}) first"
        return env, TunePlan.of(tune=("not tuned yet", would))
    entry = _time_and_cache(key, found, left_out, rule(config, env), overrides, launch_dir, force=mode == "force")
    if entry is None:
        return env, TunePlan.of(tune=("not tuned", "every candidate failed in timing: decided by the matmul rates"))
    return _chosen(env, entry, f"timed now in {entry['seconds']:.0f} s (signature {key})")


def cached_summary(config: Config, env: Environment) -> str:
    """The cached timing of this config's signature on this machine, for the doctor's report."""
    entry = read_json(tuning_file(), {}).get(signature(config, env))
    if not entry:
        return "not timed on this machine (tune=auto times the candidate steps on the first launch)"
    _, plan = _chosen(env, entry, f"timed {age_text(time.time() - entry['measured_at'])} ago")
    return f"{plan.tune}: {plan.reason('tune')}"


def _time_and_cache(key, found, left_out, rule_choice, overrides, launch_dir, force: bool) -> dict | None:
    path = tuning_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another launch may be timing the same signature: wait for it
        cached = read_json(path, {}).get(key)
        if cached and not force:
            return cached
        started = time.monotonic()
        timings = [time_candidate(c, overrides, launch_dir) for c in found]
        usable = [t for t in timings if t.examples_per_sec is not None]
        if not usable:
            return None
        fastest = max(usable, key=lambda t: t.examples_per_sec)
        tied = [t for t in usable if t.examples_per_sec >= (1 - TIE) * fastest.examples_per_sec]
        best = next((t for t in tied if t.candidate == rule_choice), fastest)
        entry = {
            "choice": asdict(best.candidate),
            "table": [
                {"step": t.candidate.label, "examples_per_sec": t.examples_per_sec, "note": t.note} for t in timings
            ],
            "left_out": left_out,
            "kept_rule": best.candidate != fastest.candidate,
            "measured_at": time.time(),
            "seconds": round(time.monotonic() - started, 1),
        }
        write_json_atomic(path, {**read_json(path, {}), key: entry})
        return entry


def time_candidate(candidate: Candidate, overrides: list[str], launch_dir: Path, steps: int = 16) -> Timing:
    """Two short epochs of this config under `candidate` in a child process; the second epoch's examples/s."""
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in OWNED_KEYS]
    with tempfile.TemporaryDirectory(prefix="launcher-tune-") as folder:
        command = [
            sys.executable,
            "-m",
            "launcher",
            *kept,
            *candidate.overrides(),
            "tune=off",
            "tracking.enabled=false",
            "checkpoint.enabled=false",
            "train.epochs=2",
            f"train.max_steps_per_epoch={steps}",
            "train.max_validation_steps=1",
            "train.max_restarts=0",
            "train.test_at_end=false",
            f"hydra.run.dir={folder}",
        ]
        try:
            subprocess.run(
                command, cwd=launch_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=TIMEOUT_SEC
            )
        except subprocess.TimeoutExpired:
            return Timing(candidate, None, f"no result within {TIMEOUT_SEC} s")
        outcome = read_json(Path(folder) / OUTCOME_FILE, {}) or {}
    history = outcome.get("history") or []
    if outcome.get("status") != "FINISHED" or len(history) < 2:
        return Timing(candidate, None, (outcome.get("error") or "failed").splitlines()[0][:200])
    rate, loss = history[-1].get("examples_per_sec"), history[-1].get("loss")
    if rate is None or loss is None or not math.isfinite(loss) or not math.isfinite(rate):
        return Timing(candidate, None, f"non-finite (loss {loss})")
    return Timing(candidate, round(float(rate), 1))


def _chosen(env: Environment, entry: dict, how: str) -> tuple[Environment, TunePlan]:
    choice = Candidate(**entry["choice"])
    table = "; ".join(
        f"{row['step']} {row['examples_per_sec']:,.0f} ex/s"
        if row["examples_per_sec"]
        else f"{row['step']} {row['note']}"
        for row in entry["table"]
    )
    left_out = f"; left out: {', '.join(entry['left_out'])}" if entry.get("left_out") else ""
    if entry.get("kept_rule"):
        left_out += f"; within {TIE:.0%} of the fastest: the matmul rates' choice kept"
    tuned = TunedStep(choice.precision, choice.xla, f"{choice.label} from {table}")
    plan = TunePlan.of(tune=(f"{choice.label}", f"{how}: {table}{left_out}"))
    return replace(env, tuned=tuned), plan


def _listed(found: list[Candidate]) -> str:
    return ", ".join(c.label for c in found) or "none"
