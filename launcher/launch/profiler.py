"""Trace a window of training steps with TensorFlow's profiler and say where the time went.

`train.profile.steps=N` traces N steps after `train.profile.skip_steps` (past tracing and
compilation). The trace (TensorBoard's profile plugin reads it) lands in the run dir's
`profile/`, and a plain-text table of the ops by self time goes beside it, to MLflow and
to stdout: enough to see, without any viewer, whether a step is matmul-bound or spends
its time elsewhere.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

# Threads whose events are the Python caller's (tf.function calls, not op work).
CALLER_THREADS = ("python",)
# Events that are a thread waiting for another, not work.
WAITING = ("BlockUntilReady",)
MATMUL_KINDS = re.compile(r"matmul|conv|dot|einsum|gemm|brgemm", re.IGNORECASE)


@dataclass(frozen=True)
class Event:
    name: str
    start_ps: int
    duration_ps: int


@dataclass(frozen=True)
class OpTime:
    kind: str
    self_ms: float
    calls: int

    @property
    def is_matmul(self) -> bool:
        return bool(MATMUL_KINDS.search(self.kind))


def op_kind(event_name: str) -> str:
    """`dense_1/MatMul:_MklMatMul` -> `_MklMatMul` (TF op); `fusion.12` -> `fusion` (XLA HLO)."""
    if ":" in event_name and "::" not in event_name:
        return event_name.rsplit(":", 1)[1]
    return re.sub(r"[._]\d+$", "", event_name)


def self_times(events: list[Event]) -> dict[str, tuple[int, int]]:
    """Per event kind on one thread: (self time in ps, calls). Nested events are subtracted
    from their parent, so wrappers (executor, thunk runner) keep only their own overhead."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    ordered = sorted(events, key=lambda e: (e.start_ps, -e.duration_ps))
    stack: list[tuple[Event, list[int]]] = []  # (event, [children time])

    def close(entry):
        event, children = entry
        kind = op_kind(event.name)
        totals[kind][0] += max(0, event.duration_ps - children[0])
        totals[kind][1] += 1

    for event in ordered:
        while stack and stack[-1][0].start_ps + stack[-1][0].duration_ps <= event.start_ps:
            close(stack.pop())
        if stack:
            stack[-1][1][0] += event.duration_ps
        stack.append((event, [0]))
    while stack:
        close(stack.pop())
    return {kind: (ps, calls) for kind, (ps, calls) in totals.items()}


def summarize(threads: dict[str, list[Event]], steps: int, top: int = 15) -> list[OpTime]:
    """Op kinds by self time per traced step, summed over the worker threads."""
    combined: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for thread, events in threads.items():
        if thread in CALLER_THREADS:
            continue
        for kind, (ps, calls) in self_times(events).items():
            combined[kind][0] += ps
            combined[kind][1] += calls
    per_step = max(steps, 1)
    rows = [
        OpTime(kind, ps / 1e9 / per_step, calls)
        for kind, (ps, calls) in combined.items()
        if ps > 0 and kind not in WAITING
    ]
    return sorted(rows, key=lambda r: -r.self_ms)[:top] if top else sorted(rows, key=lambda r: -r.self_ms)


def format_table(rows: list[OpTime], steps: int, header: str = "") -> str:
    busy = sum(r.self_ms for r in rows)
    matmul = sum(r.self_ms for r in rows if r.is_matmul)
    lines = [header] if header else []
    lines.append(
        f"traced steps: {steps}; worker-thread time per step in the ops below: {busy:.1f} ms, "
        f"of which matmul/conv {matmul:.1f} ms ({matmul / busy:.0%})"
        if busy
        else "no op events traced"
    )
    lines.append(f"{'op':<40}{'ms/step':>10}{'share':>8}{'calls':>8}")
    for r in rows:
        lines.append(f"{r.kind[:39]:<40}{r.self_ms:>10.2f}{r.self_ms / busy:>8.0%}{r.calls:>8}")
    return "\n".join(lines)


def read_trace(logdir: Path) -> dict[str, list[Event]]:
    """Host CPU events per thread from the newest .xplane.pb under `logdir`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    files = sorted(Path(logdir).rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not files:
        return {}
    space = xplane_pb2.XSpace()
    space.ParseFromString(files[-1].read_bytes())
    threads: dict[str, list[Event]] = defaultdict(list)
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            thread = line.name.split("/", 1)[0] if line.name != "python" else "python"
            key = f"{thread}/{line.id}" if thread not in CALLER_THREADS else thread
            for e in line.events:
                name = plane.event_metadata[e.metadata_id].name
                threads[key].append(Event(name, e.offset_ps, e.duration_ps))
    return dict(threads)


class StepProfiler:
    """Starts the trace at the first step boundary at or after `skip`, stops after `steps` more.

    `trace=False` keeps the same window boundaries without tracing: a multi-worker job's
    non-chief workers must cut their step chunks where the chief does.
    """

    def __init__(self, logdir: Path, skip: int, steps: int, trace: bool = True):
        self.logdir = Path(logdir)
        self.skip = skip
        self.steps = steps
        self.trace = trace
        self.started_at: int | None = None
        self.traced_steps = 0
        self.done = steps <= 0

    def steps_until_boundary(self, global_step: int) -> int | None:
        if self.done:
            return None
        if self.started_at is None:
            return max(self.skip - global_step, 0) or None
        return max(self.started_at + self.steps - global_step, 0) or None

    def after_steps(self, global_step: int) -> bool:
        """Start or stop at this boundary; True when the trace has just been stopped."""
        import tensorflow as tf

        if self.done:
            return False
        if self.started_at is None:
            if global_step < self.skip:
                return False
            if self.trace:
                self.logdir.mkdir(parents=True, exist_ok=True)
                try:
                    tf.profiler.experimental.start(str(self.logdir))
                except tf.errors.OpError as err:  # e.g. another trace is running: train on, untraced
                    print(f"\nProfiling not started ({err.message}); training continues.", flush=True)
                    self.done = True
                    return False
            self.started_at = global_step
            return False
        if global_step - self.started_at >= self.steps:
            return self.stop(global_step)
        return False

    def stop(self, global_step: int) -> bool:
        """Stop a running trace (also at the end of training, if it ends inside the window)."""
        import tensorflow as tf

        if self.done or self.started_at is None:
            return False
        self.done = True
        if not self.trace:
            return False
        tf.profiler.experimental.stop()
        self.traced_steps = global_step - self.started_at
        return True

    def report(self, header: str = "") -> str:
        rows = summarize(read_trace(self.logdir), self.traced_steps)
        text = format_table(rows, self.traced_steps, header)
        (self.logdir / "top_ops.txt").write_text(text + "\n")
        return text
