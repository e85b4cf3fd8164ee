"""`tune=auto`: time the steps `precision=auto` / `xla=auto` / `optimizer.update=auto` allow on this model and
machine, use the fastest.

A matmul probe cannot know how a convnet or a model with small layers runs; timing the real step can. The
candidates (a precision, an XLA setting and an update kind the resolver accepts for this config) are built and
timed in one child process (`launcher.launch.step_timing`: the launch's own TensorFlow runtime is untouched, its
devices and policy are set once), in interleaved rounds, each with its median rate and spread; the fastest is
then timed beside itself at 4x the steps per call, when the person left that at its default. The choice is cached
per signature (model, data, batch, strategy, optimizer, steps per call, machine, TensorFlow version) in
`$LAUNCHER_CACHE/step_tuning.json` under a file lock; later launches with the same signature read it
(`tune=force` times again). The resolver decides by the result (`Environment.tuned`) and the Plan quotes the table
(`tune`). Multi-worker jobs never tune: every worker must run the same step, and timing on each could disagree;
they decide by the matmul rates' rule.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import pickle
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from launcher.config.models import model_kind
from launcher.config.optimizers import xla_breaks
from launcher.config.precisions import PRECISIONS, baseline, by_preference
from launcher.config.schema import Config, OptimizerUpdate, PrecisionName, TrainConfig, as_dict
from launcher.config.strategies import strategy_of
from launcher.files import read_json, write_json_atomic
from launcher.plan.decisions import TunePlan
from launcher.plan.environment import Environment, TunedStep
from launcher.plan.hardware import (
    BUSY_SHARE,
    MAX_AGE_SEC,
    RETRY_SEC,
    age_text,
    cache_file,
    cpu_snapshot,
    machine_key,
    others_share,
)
from launcher.plan.resolve import resolve_all
from launcher.plan.rules.step import FUSED_KERNELS, TUNE_CHOICES, slow_xla_bfloat16, slow_xla_convolutions

FORMAT = 3  # of a cached entry: 2 added update kinds and steps per call, 3 layer swaps (older entries: timed again)
TIMEOUT_SEC = 300  # the timing child, every candidate
ROUNDS = 3  # interleaved timed rounds per candidate
# Steps timed within this of the fastest are a tie (medians of three short rounds): the rate rule's choice is kept
# then, and a longer call is taken only when it is more than this faster.
TIE = 0.05


@dataclass(frozen=True)
class Candidate:
    """One step the resolver allows: precision, XLA, how the update is applied, and (None: as configured) the
    steps per call and the layer swaps ("off": the model as stock Keras)."""

    precision: str
    xla: bool
    update: str = OptimizerUpdate.keras.value
    steps_per_execution: int | None = None
    layer_swaps: str | None = None

    @property
    def label(self) -> str:
        fused = self.update == OptimizerUpdate.fused.value  # under XLA too when several replicas apply outside it
        kind = ("xla+fused" if fused else "xla") if self.xla else ("hybrid" if fused else "graph")
        calls = f" x{self.steps_per_execution}" if self.steps_per_execution else ""
        swaps = f" swaps {self.layer_swaps}" if self.layer_swaps else ""
        return f"{self.precision} {kind}{calls}{swaps}"

    def applied(self, config: Config) -> Config:
        """A copy of `config` running this step."""
        trial = copy.deepcopy(config)
        trial.precision.name = PrecisionName(self.precision)
        trial.xla = "true" if self.xla else "false"
        trial.optimizer.update = OptimizerUpdate(self.update)
        if self.steps_per_execution:
            trial.train.steps_per_execution = self.steps_per_execution
        if self.layer_swaps:
            trial.model.layer_swaps = self.layer_swaps
        return trial


@dataclass(frozen=True)
class Timing:
    candidate: Candidate
    examples_per_sec: float | None  # None: it failed or went non-finite
    note: str = ""
    spread: tuple[float, float] | None = None  # the slowest and fastest round


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
    optimizer XLA breaks, and on CPUs for a model that declares itself convolutional; bf16 under XLA is left out on
    a CPU whose XLA bfloat16 matmuls are no faster than its float32 ones when fp32 under XLA is timed), each with
    the update kind optimizer.update=auto resolves to (the other kind is timed beside the fastest step only:
    `update_variants`); fixed where the person fixed them. A candidate the resolver refuses is left out, with why."""
    auto_precision = config.precision.name == PrecisionName.auto
    auto_xla = str(config.xla).strip().lower() == "auto"
    kept, left_out = [], []
    precisions = _native_precisions(env, left_out) if auto_precision else [config.precision.name.value]
    breaks = xla_breaks(config.optimizer.name)
    if auto_xla and breaks:
        left_out.append(f"xla: optimizer.name={config.optimizer.name}: {breaks}")
    xlas = ([False] if breaks else [False, True]) if auto_xla else [str(config.xla).strip().lower() == "true"]
    slow_convolutions = slow_xla_convolutions(env, model_kind(config.model))
    if auto_xla and not breaks and slow_convolutions:
        xlas = [False]
        left_out.append(f"xla: {slow_convolutions}; not timed (each XLA compile costs the timing ~6 s)")
    untuned = replace(env, tuned=None)
    for precision in precisions:
        for xla in xlas:
            bfloat16 = PRECISIONS[precision].compute_dtype == "bfloat16"
            if xla and bfloat16 and baseline().name in precisions and (slow := slow_xla_bfloat16(env)):
                left_out.append(f"{precision} xla: {slow}; not timed")
                continue
            asked = Candidate(precision, xla, config.optimizer.update.value)
            plan, problems = resolve_all(asked.applied(config), untuned)
            candidate = replace(asked, update=plan.step.update)  # what optimizer.update=auto resolves to
            if problems:
                left_out.append(f"{candidate.label}: {problems[0].key}={problems[0].value!r} refused")
            else:
                kept.append(candidate)
    return kept, left_out


def _native_precisions(env: Environment, left_out: list[str]) -> list[str]:
    """The precisions precision=auto may time here, float32 first, then as auto prefers them: each this hardware has
    the instructions for (an emulated dtype is always slower); one a CPU could have but this one lacks is noted."""
    native = []
    for precision in [baseline(), *(p for p in by_preference() if not p.baseline)]:
        if precision.native_on(env):
            native.append(precision.name)
        elif precision.cpu_instructions is not None:
            left_out.append(
                f"{precision.name}: this CPU has no {precision.compute_dtype} instructions (emulated: always slower)"
            )
    return native


def update_variants(config: Config, env: Environment, found: list[Candidate]) -> dict[Candidate, list[Candidate]]:
    """Per candidate, the step with the other update kind (a fused kernel or Keras's ops) when optimizer.update=auto
    allows both: timed beside the fastest candidate only. The update kind moved a step by 2-30% in the tables so
    far where the precision or XLA moved it by up to 2x, so it is chosen once they are, and each candidate costs
    one build (~2-3 s) fewer. None where XLA compiles the update with the step (one replica)."""
    if config.optimizer.update != OptimizerUpdate.auto or str(config.optimizer.name).strip() not in FUSED_KERNELS:
        return {}
    untuned = replace(env, tuned=None)
    replicas = resolve_all(config, untuned)[0].strategy.replicas
    variants = {}
    for candidate in found:
        if candidate.xla and replicas == 1:
            continue
        other = OptimizerUpdate.keras if candidate.update == OptimizerUpdate.fused.value else OptimizerUpdate.fused
        trial = replace(candidate, update=other.value)
        if not resolve_all(trial.applied(config), untuned)[1]:
            variants[candidate] = [trial]
    return variants


def more_steps_per_call(config: Config, overrides: list[str]) -> tuple[int, ...]:
    """Steps per call to try beside the fastest step: 4x train.steps_per_execution when the person left it at its
    default (a value given on the command line or in a config file other than the default is kept)."""
    given = any(o.split("=", 1)[0].lstrip("+~") == "train.steps_per_execution" for o in overrides)
    if given or config.train.steps_per_execution != TrainConfig().steps_per_execution:
        return ()
    return (4 * config.train.steps_per_execution,)


def rule(config: Config, env: Environment) -> Candidate:
    """What the matmul rates' rule picks without timing."""
    plan, _ = resolve_all(config, replace(env, tuned=None))
    return Candidate(plan.precision.name, plan.step.xla, plan.step.update)


SPEED_NEUTRAL = ("dropout",)  # model rates whose value above 0 changes the numbers a step computes, not its cost


def signature(config: Config, env: Environment) -> str:
    """What a step's speed depends on: the model, the data, the batch, the strategy, the optimizer, steps per
    call, the machine and TensorFlow. A changed batch or model width is another signature; a rerun, or another
    learning rate, seed, epoch count or dropout rate (jobs of one sweep) is not."""
    settings = as_dict(config)
    parts = {
        # A dropout rate costs the same at any value above 0 (at 0 the layer is left out): jobs of a sweep over it
        # share one measurement.
        "model": {k: (v > 0 if k in SPEED_NEUTRAL else v) for k, v in settings["model"].items()},
        "dataset": {k: v for k, v in settings["dataset"].items() if k not in ("shuffle_seed",)},
        "scaling": settings["scaling"],
        "strategy": settings["strategy"],
        "optimizer": {k: settings["optimizer"][k] for k in ("name", "update")},
        "steps_per_execution": settings["train"]["steps_per_execution"],
        "task": settings["task"],
        "machine": machine_key(),
        "tensorflow": env.tf_version,
        "format": FORMAT,
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
    if not strategy_of(config.strategy.kind).single_process:
        why = "multi-worker jobs never tune: every worker runs the step the matmul rates' rule picks, the same on each"
        return env, TunePlan.of(tune=("not tuned", why))
    found, left_out = candidates(config, env)
    more = more_steps_per_call(config, overrides)
    others = update_variants(config, env, found)
    if len(found) < 2 and not more and not others:
        return env, TunePlan.of(tune=("not tuned", f"one candidate step ({_listed(found)}): nothing to choose"))
    key = signature(config, env)
    cached = read_json(tuning_file(), {}).get(key)
    if cached and mode != "force" and (config.explain or not due(cached, clock())):
        return _chosen(env, cached, f"cached {_trust(cached, clock())} (signature {key})")
    if config.explain:
        would = f"tune={mode}: a launch would time {len(found)} candidate steps ({_listed(found)}) first"
        return env, TunePlan.of(tune=("not tuned yet", would))
    job = TimingJob(config, env, found, more, launch_dir, others)
    entry, fresh = _time_and_cache(key, job, left_out, rule(config, env), force=mode == "force")
    if entry is None:
        return env, TunePlan.of(tune=("not tuned", "every candidate failed in timing: decided by the matmul rates"))
    if not fresh:  # another launch timed it meanwhile, or a busy re-timing left the sound table in place
        return _chosen(env, entry, f"cached {_trust(entry, clock())} (signature {key})")
    how = f"timed now in {entry['seconds']:.0f} s" + (f"; {_provisional(entry)}" if _provisional(entry) else "")
    return _chosen(env, entry, f"{how} (signature {key})")


def clock() -> float:
    """Now, for the cache's ages (a function of this module: tests move it)."""
    return time.time()


def _provisional(entry: dict) -> str:
    """Why a cached table is provisional ("" when it is sound): timed while other processes used the CPU."""
    busy = entry.get("busy")
    if busy is not None and busy > BUSY_SHARE:
        return f"provisional: timed while other processes used {busy:.0%} of the CPU"
    return ""


def due(entry: dict, now: float) -> bool:
    """Whether a launch at `now` times this signature again: a provisional table once RETRY_SEC passed since the
    last try, a sound one after MAX_AGE_SEC (what the matmul rates do)."""
    if now - entry.get("checked_at", entry["measured_at"]) < RETRY_SEC:
        return False
    return bool(_provisional(entry)) or now - entry["measured_at"] >= MAX_AGE_SEC


def _trust(entry: dict, now: float) -> str:
    text = f"{age_text(now - entry['measured_at'])} ago"
    if _provisional(entry):
        retry = max(entry.get("checked_at", entry["measured_at"]) + RETRY_SEC - now, 0)
        text += f"; {_provisional(entry)}: timed again by a launch from {age_text(retry)} on"
    return text


def cached_summary(config: Config, env: Environment) -> str:
    """The cached timing of this config's signature on this machine, for the doctor's report."""
    entry = read_json(tuning_file(), {}).get(signature(config, env))
    if not entry:
        return "not timed on this machine (tune=auto times the candidate steps on the first launch)"
    _, plan = _chosen(env, entry, f"timed {_trust(entry, clock())}")
    return f"{plan.tune}: {plan.reason('tune')}"


def copy_table(config: Config, env: Environment, path: Path) -> None:
    """This config's cached timing table, beside the run's Plan (MLflow logs it as an artifact); nothing when the
    config was not timed."""
    entry = read_json(tuning_file(), {}).get(signature(config, env))
    if entry:
        write_json_atomic(path, {"signature": signature(config, env), **entry})


@dataclass(frozen=True)
class TimingJob:
    """What the timing child is given: the launch's config and machine, the candidates, and what to try beside the
    fastest: longer calls and (per candidate) the other update kind."""

    config: Config
    env: Environment
    found: list[Candidate]
    more_steps_per_call: tuple[int, ...]
    launch_dir: Path
    update_variants: dict[Candidate, list[Candidate]] = field(default_factory=dict)


def _time_and_cache(
    key: str, job: TimingJob, left_out: list[str], rule_choice: Candidate, force: bool
) -> tuple[dict | None, bool]:
    """The table this launch decides by (None: every candidate failed) and whether it is the one just timed."""
    path = tuning_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another launch may be timing the same signature: wait for it
        cached = read_json(path, {}).get(key)
        if cached and not force and not due(cached, clock()):
            return cached, False  # another launch timed it meanwhile
        started = time.monotonic()
        before = cpu_snapshot()
        timings = time_candidates(job)
        busy = others_share(before, cpu_snapshot())
        usable = [t for t in timings if t.examples_per_sec is not None]
        if not usable:
            return None, False
        fastest = max(usable, key=lambda t: t.examples_per_sec)
        tied = [t for t in usable if t.examples_per_sec >= (1 - TIE) * fastest.examples_per_sec]
        best = next((t for t in tied if t.candidate == rule_choice), None) or next(
            (t for t in tied if not (t.candidate.steps_per_execution or t.candidate.layer_swaps)), fastest
        )
        best, kept_precision = _numerics_beyond_noise(best, usable, rule_choice.precision)
        entry = {
            "choice": asdict(best.candidate),
            "table": [
                {
                    "step": t.candidate.label,
                    "examples_per_sec": t.examples_per_sec,
                    "spread": list(t.spread) if t.spread else None,
                    "note": t.note,
                }
                for t in timings
            ],
            "left_out": left_out,
            "numerics": _numerics(job.found),
            "kept_rule": best.candidate != fastest.candidate and not kept_precision,
            "kept_precision": kept_precision,
            "measured_at": (now := clock()),
            "checked_at": now,
            "busy": None if busy is None else round(busy, 3),
            "seconds": round(time.monotonic() - started, 1),
        }
        if cached and not force and not _provisional(cached) and _provisional(entry):
            kept = {**cached, "checked_at": now}  # a busy re-timing never replaces a sound table
            write_json_atomic(path, {**read_json(path, {}), key: kept})
            return kept, False
        write_json_atomic(path, {**read_json(path, {}), key: entry})
        return entry, True


def _numerics_beyond_noise(best: Timing, usable: list[Timing], precision: str) -> tuple[Timing, str]:
    """Another precision changes the numerics: timing switches to it only when its slowest round beat the fastest
    round of the rule's precision's fastest step (without spreads, by more than a tie). Else that step stands, and
    the reason says why."""
    same = [t for t in usable if t.candidate.precision == precision]
    if best.candidate.precision == precision or not same:
        return best, ""
    rival = max(same, key=lambda t: t.examples_per_sec)
    if best.spread and rival.spread:
        beyond = best.spread[0] > rival.spread[1]
    else:
        beyond = best.examples_per_sec > (1 + TIE) * rival.examples_per_sec
    if beyond:
        return best, ""
    return rival, (
        f"{best.candidate.label} was not faster than {rival.candidate.label} beyond the rounds' spread: the rule's "
        f"precision ({precision}) kept, numerics change only for a measured gain"
    )


def time_candidates(job: TimingJob) -> list[Timing]:
    """Every candidate timed in one child process (`launcher.launch.step_timing`), interleaved; a candidate that
    failed, was refused or went non-finite has no rate and says why. The launch's own runtime is untouched."""
    with tempfile.TemporaryDirectory(prefix="launcher-tune-") as folder:
        spec, result = Path(folder) / "spec.pkl", Path(folder) / "result.json"
        spec.write_bytes(
            pickle.dumps(
                {
                    "config": job.config,
                    "env": replace(job.env, tuned=None),
                    "candidates": job.found,
                    "rounds": ROUNDS,
                    "more_steps_per_call": job.more_steps_per_call,
                    "update_variants": job.update_variants,
                }
            )
        )
        command = [sys.executable, "-m", "launcher.launch.step_timing", str(spec), str(result)]
        try:
            done = subprocess.run(command, cwd=job.launch_dir, capture_output=True, text=True, timeout=TIMEOUT_SEC)
        except subprocess.TimeoutExpired:
            return [Timing(c, None, f"no result within {TIMEOUT_SEC} s") for c in job.found]
        rows = (read_json(result, {}) or {}).get("rows")
    if not rows:
        why = (done.stderr.strip().splitlines() or ["the timing process failed"])[-1][:200]
        return [Timing(c, None, why) for c in job.found]
    return [
        Timing(Candidate(**row["candidate"]), row["examples_per_sec"], row["note"], _pair(row["spread"]))
        for row in rows
    ]


def _numerics(found: list[Candidate]) -> str:
    """What the Plan says when candidates compute in another precision than float32."""
    others = sorted({c.precision for c in found if not PRECISIONS[c.precision].baseline})
    if not others:
        return ""
    return (
        f"{' and '.join(others)} change the numerics (fewer mantissa bits; float16 with loss scaling): "
        "timed because precision=auto allows them"
    )


def _pair(spread) -> tuple[float, float] | None:
    return (spread[0], spread[1]) if spread else None


def _chosen(env: Environment, entry: dict, how: str) -> tuple[Environment, TunePlan]:
    choice = Candidate(**entry["choice"])
    table = "; ".join(_row_text(row) for row in entry["table"])
    left_out = f"; left out: {', '.join(entry['left_out'])}" if entry.get("left_out") else ""
    if entry.get("kept_rule"):
        left_out += f"; within {TIE:.0%} of the fastest: the matmul rates' choice kept"
    if entry.get("kept_precision"):
        left_out += f"; {entry['kept_precision']}"
    if entry.get("numerics"):
        left_out += f"; {entry['numerics']}"
    tuned = TunedStep(
        choice.precision,
        choice.xla,
        f"{choice.label} from {table}",
        choice.update,
        choice.steps_per_execution,
        choice.layer_swaps,
    )
    plan = TunePlan.of(tune=(f"{choice.label}", f"{how}: {table}{left_out}"))
    return replace(env, tuned=tuned), plan


def _row_text(row: dict) -> str:
    if not row["examples_per_sec"]:
        return f"{row['step']} {row['note']}"
    if row["note"]:  # timed, then cut after a round (launcher.launch.step_timing.cut_far_slower)
        return f"{row['step']} {row['examples_per_sec']:,.0f} ex/s ({row['note']})"
    spread = row.get("spread")
    within = f" [{spread[0]:,.0f}-{spread[1]:,.0f}]" if spread else ""
    return f"{row['step']} {row['examples_per_sec']:,.0f}{within} ex/s"


def _listed(found: list[Candidate]) -> str:
    return ", ".join(c.label for c in found) or "none"
