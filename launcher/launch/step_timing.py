"""The child process of `tune=auto`: every candidate step built and timed in this one process, interleaved.

`python -m launcher.launch.step_timing <spec.pkl> <result.json>`. The spec holds the launch's typed config, its
environment and the candidates (`launcher.launch.tuning`). One process pays TensorFlow's start once for all of them
(a process per candidate cost ~5 s each: 22-57 s for four). Each candidate is reviewed, built and warmed up (its
trace and compilation are not timed), then the candidates take turns: round after round each trains a few more
chunks, so a burst of load on the machine falls on every candidate rather than on one. A round's first chunks run
untimed while slower than the candidate's warm step (after another candidate was built, its first steps stall), a
round's rate is its median chunk's and a candidate's the median of its rounds, with their spread. After two rounds
the candidates whose better round is below 70% of the fastest's are timed no further (their rounds stay in the
table); so are the fastest's variants after two of theirs. Nothing is validated: only the step is timed. The policy
and devices are set per candidate by the same `runtime.configure` the launch uses; precision lives on each built
model, so candidates coexist.
"""

from __future__ import annotations

import json
import math
import pickle
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from launcher import background
from launcher.config.errors import ConfigError
from launcher.contract import Hook, HookList, Position
from launcher.launch.review import review
from launcher.launch.stopping import numerics_guard
from launcher.train import runtime

ROUNDS = 3  # timed rounds per candidate, interleaved
# After CUT_AFTER rounds, a candidate whose best of them is below this share of the fastest's best is timed no
# further. A burst of load can slow a whole round by 1.6x (the LM's fp32 xla at 117-119 ex/s against its usual
# 190-200 in 2 of ~10 timings, AMD EPYC): judged on one round, it was cut; a burst hitting both rounds is rarer.
# 0.8 cut a CNN step that had tied for fastest in the run before; below 0.7 a candidate is out of the running.
KEEP = 0.7
CUT_AFTER = 2
ROUND_SEC = 0.3  # at least this much timed training per round (and at least MIN_CHUNKS chunks)
MIN_CHUNKS = 2
MAX_CHUNKS = 400
# A chunk of steps_per_execution heavy steps can take seconds (16 x 90 ms on the 3x2048 MLP): the timed chunks are
# cut to about this long. Where steps are that slow, the host's work between calls is noise beside them.
CHUNK_SEC = 0.1
# A round's first chunks run untimed while a step in them is slower than SETTLED x the candidate's warm step, at
# most SETTLE_CHUNKS of them (see _Stopwatch); a chunk at speed is timed at once.
SETTLE_CHUNKS = 3
SETTLED = 1.5
WARM_CHUNKS = 3  # one step each: the first traces and compiles, the others say how long a step takes
# What the timing changes on every candidate: nothing written, nothing validated inside the timed chunks.
TIMING_SETTINGS = {
    "epochs": 100_000,  # the rounds decide when to stop
    "max_steps": 0,
    "max_validation_steps": 1,
    "val_every_steps": 0,
    "test_at_end": False,
    "measure_utilization": False,
}


@dataclass
class Timed:
    """One candidate in this process: its engine once built, its rounds' rates, or why it could not be timed."""

    candidate: object  # launcher.launch.tuning.Candidate
    engine: object = None
    chunk_steps: int | None = None  # the timed chunks' length (None: the engine's own, steps_per_execution)
    position: Position = field(default_factory=Position)
    rates: list[float] = field(default_factory=list)
    note: str = ""
    swapped: bool = False  # the build swapped some of the model's layers for fused kernels
    step_sec: float | None = None  # the fastest warm-up step: what a settled step takes
    cut: bool = False  # timed no further: far slower than the fastest after CUT_AFTER rounds (see the note)

    def row(self) -> dict:
        failed = self.engine is None
        rate = round(statistics.median(self.rates), 1) if self.rates and not failed else None
        spread = [min(self.rates), max(self.rates)] if rate is not None else None
        return {"candidate": asdict(self.candidate), "examples_per_sec": rate, "spread": spread, "note": self.note}


class _Stopwatch(Hook):
    """Times the chunks of one round: each from the end of the chunk before it in the same epoch (host work
    between chunks counts: it is what steps_per_execution amortises), or from just before it after an epoch
    boundary; stops training once the round has enough.

    Up to `settle` chunks at a round's start are run, not timed, while their steps take longer than
    `settled_sec` (without it: the first `settle` chunks, whatever their speed): the first step of a candidate
    after another candidate was built is several times slower than the rest (on the LM: 0.5-0.9 s against
    0.06-0.1 s, with no retracing), a cost a training run never pays. Timed, it put a round at a quarter of the
    others and spread every table's rounds 4-8x. A burst of load lasting a whole round is not settled away:
    the cut waits for two rounds (CUT_AFTER)."""

    def __init__(
        self,
        engine,
        min_chunks: int = MIN_CHUNKS,
        min_seconds: float = ROUND_SEC,
        chunk_steps: int | None = None,
        settle: int = 0,
        settled_sec: float | None = None,
    ):
        self.model, self.global_batch = engine.model, engine.global_batch  # the engine the round trains
        self.settle, self.settled_sec = settle, settled_sec
        self.min_chunks, self.min_seconds, self.chunk_steps = min_chunks, min_seconds, chunk_steps
        self.seconds, self.steps, self.chunks = 0.0, 0, 0
        self.per_step: list[float] = []  # each chunk's seconds per step
        self._since: float | None = None
        self._epoch = -1

    def steps_until_boundary(self, position: Position) -> int | None:
        if position.epoch != self._epoch or self._since is None:
            self._since, self._epoch = time.perf_counter(), position.epoch
        return self.chunk_steps

    def after_steps(self, position: Position, logs: dict) -> None:
        now = time.perf_counter()
        ran = logs["telemetry"].ran
        if not all(math.isfinite(v) for v in logs["telemetry"].losses):
            raise FloatingPointError(f"non-finite loss at step {position.global_step}")
        if self.settle > 0:
            if self.settled_sec is None or (now - self._since) / max(ran, 1) > self.settled_sec:
                self.settle -= 1
                self._since = now
                return
            self.settle = 0  # at speed: timed from this chunk on
        self.seconds += now - self._since
        self.per_step.append((now - self._since) / max(ran, 1))
        self.steps += ran
        self.chunks += 1
        self._since = now
        if self.chunks >= MAX_CHUNKS or (self.chunks >= self.min_chunks and self.seconds >= self.min_seconds):
            self.model.stop_training = True

    @property
    def rate(self) -> float:
        """Examples/s at the round's median chunk: a burst of load on the machine during one chunk moves it less
        than the round's total would move."""
        return self.global_batch / statistics.median(self.per_step) if self.per_step else 0.0


def prepare(candidate, config, env) -> Timed:
    """Review and build `config` under `candidate`, then run a few one-step chunks (trace, compile, warm the
    caches) and size the timed chunks from them."""
    from launcher.train.build import build
    from launcher.train.engine import Engine, EngineSettings

    timed = Timed(candidate)
    candidate_config = candidate.applied(config)
    candidate_config.train = replace(candidate_config.train, **TIMING_SETTINGS)
    try:
        checked = review(
            candidate_config, env, lambda p: runtime.configure(p, candidate_config.seed, candidate_config.deterministic)
        )
        if checked.problems:
            timed.note = f"refused: {ConfigError(checked.problems).violations[0].key}"
            return timed
        built = build(candidate_config, checked.plan, checked.source, checked.strategy)
        timed.swapped = bool(built.swaps and built.swaps.swapped)
        settings = EngineSettings(
            seed=candidate_config.seed,
            shuffle_buffer=candidate_config.dataset.shuffle_buffer,
            verbose=0,
            guard=numerics_guard(candidate_config, checked.plan),
            validate=False,
        )
        timed.engine = Engine(built, checked.plan, checked.source, settings)
        warm = _Stopwatch(timed.engine, WARM_CHUNKS, 0.0, chunk_steps=1)
        timed.engine.fit(TIMING_SETTINGS["epochs"], start=timed.position, hooks=HookList([warm]))
        step_sec = timed.step_sec = min(warm.per_step[1:])
        calls = checked.plan.step.steps_per_execution
        fitting = max(1, int(CHUNK_SEC / step_sec)) if step_sec > 0 else calls
        timed.chunk_steps = fitting if fitting < calls else None
    except Exception as err:  # a candidate that cannot run is a finding of the table, not a failed launch
        timed.engine, timed.note = None, _why(err)
    return timed


def time_round(timed: Timed) -> None:
    """One more round of a built candidate; a failure ends its timing (no engine) and says why."""
    engine = timed.engine
    settled = SETTLED * timed.step_sec if timed.step_sec else None
    watch = _Stopwatch(engine, chunk_steps=timed.chunk_steps, settle=SETTLE_CHUNKS, settled_sec=settled)
    try:
        engine.fit(TIMING_SETTINGS["epochs"], start=timed.position, hooks=HookList([watch]))
    except Exception as err:
        timed.engine, timed.note = None, _why(err)
        return
    timed.rates.append(round(watch.rate, 1))


def time_all(
    candidates,
    config,
    env,
    rounds: int = ROUNDS,
    more_steps_per_call: tuple[int, ...] = (),
    update_variants: dict | None = None,
) -> list[dict]:
    """The candidates' rows (label, examples/s median, [min, max] over the rounds, note), in the given order.

    The fastest candidate is then timed again beside its variants, interleaved (its rounds pooled): its step with
    the other update kind (`update_variants`, by candidate), copies of it running `more_steps_per_call` steps per
    call, and, when its build swapped layers for fused kernels (model.layer_swaps=auto), a copy with every layer
    stock. They only matter once the step itself is chosen, and each is one more build rather than one per
    candidate. A variant far slower after two rounds is timed no further, as in the first phase."""
    prepared = [prepare(c, config, env) for c in candidates]
    _rounds(prepared, rounds, cut=True)
    timed_ok = [t for t in prepared if t.engine is not None and t.rates]
    if timed_ok:
        best = max(timed_ok, key=lambda t: statistics.median(t.rates))
        # A call longer than half an epoch cannot run whole (chunks end at the epoch's end): nothing to time.
        fitting = [n for n in more_steps_per_call if 2 * n <= best.engine.plan.schedule.steps_per_epoch]
        variants = list((update_variants or {}).get(best.candidate, ()))
        variants += [replace(best.candidate, steps_per_execution=n) for n in fitting]
        if best.swapped:
            variants.append(replace(best.candidate, layer_swaps="off"))
        variants = [prepare(v, config, env) for v in variants]
        if variants:
            _rounds([best, *variants], rounds, cut=True)
            prepared += variants
    return [t.row() for t in prepared]


def _rounds(prepared: list[Timed], rounds: int, cut: bool = False) -> None:
    """Every candidate a round in turn, `rounds` times; with `cut`, the far slower ones only the first CUT_AFTER."""
    for index in range(rounds):
        for timed in prepared:
            if timed.engine is not None and not timed.cut:  # None: it could not be built, or failed a round
                time_round(timed)
        if cut and index == CUT_AFTER - 1 and index < rounds - 1:
            cut_far_slower(prepared)


def cut_far_slower(prepared: list[Timed], keep: float = KEEP) -> None:
    """Mark the candidates whose best of this phase's rounds (the last CUT_AFTER) ran below `keep` of the fastest's
    best: they are timed no further, and their rate stays in the table."""
    best = {id(t): max(t.rates[-CUT_AFTER:]) for t in prepared if t.engine is not None and t.rates}
    if not best:
        return
    fastest = max(best.values())
    for timed in prepared:
        rate = best.get(id(timed))
        if rate is not None and rate < keep * fastest:
            timed.cut = True
            rounds = len(timed.rates)
            timed.note = f"{rounds} round{'s' if rounds > 1 else ''}: below {keep:.0%} of the fastest's {fastest:,.0f}"


def _why(err: Exception) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[-1][:200] if lines else ''}"


def main(spec_path: str, result_path: str) -> None:
    spec = pickle.loads(Path(spec_path).read_bytes())
    started = time.monotonic()
    rows = time_all(
        spec["candidates"],
        spec["config"],
        spec["env"],
        spec["rounds"],
        spec["more_steps_per_call"],
        spec["update_variants"],
    )
    Path(result_path).write_text(json.dumps({"rows": rows, "seconds": round(time.monotonic() - started, 1)}))


if __name__ == "__main__":
    try:
        main(*sys.argv[1:3])
    finally:
        background.settle()  # the engine's iterator drops end before the interpreter does
