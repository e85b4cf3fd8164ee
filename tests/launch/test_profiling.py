"""The profile summary (pure: synthetic trace events) and a real traced CLI run.

The hook that traces the window: `launcher.launch.hooks.profiling`.
"""

from __future__ import annotations

from support.config import TINY

from launcher.launch.profiler import (
    Event,
    OpTime,
    StepProfiler,
    format_table,
    op_kind,
    self_times,
    summarize,
)


def test_op_kind_reads_tf_ops_and_xla_instructions():
    assert op_kind("gradient_tape/dense_1/MatMul/MatMul:_MklMatMul") == "_MklMatMul"
    assert op_kind("sgd/AssignSubVariableOp_2:AssignSubVariableOp") == "AssignSubVariableOp"
    assert op_kind("fusion.12") == "fusion"
    assert op_kind("MatMul_1.4") == "MatMul_1"
    assert op_kind("ExecutorState::Process") == "ExecutorState::Process"


def test_self_time_subtracts_nested_events_from_their_parent():
    ps = 1_000_000_000  # 1 ms
    events = [
        Event("ExecutorState::Process", 0, 10 * ps),
        Event("a/MatMul:_MklMatMul", 1 * ps, 6 * ps),
        Event("a/Relu:Relu", 7 * ps, 2 * ps),
        Event("ExecutorState::Process", 20 * ps, 3 * ps),
        Event("b/MatMul:_MklMatMul", 20 * ps, 3 * ps),
    ]
    times = self_times(events)
    assert times["_MklMatMul"] == (9 * ps, 2)
    assert times["Relu"] == (2 * ps, 1)
    assert times["ExecutorState::Process"] == (2 * ps, 2)  # 10 - 6 - 2, and 3 - 3


def test_summary_is_per_step_over_worker_threads_only():
    ps = 1_000_000_000
    threads = {
        "python": [Event("step:__inference_step_1", 0, 100 * ps)],
        "tf_Compute/1": [Event("x:_MklMatMul", 0, 8 * ps)],
        "tf_Compute/2": [Event("y:_MklMatMul", 0, 4 * ps), Event("y:Mul", 5 * ps, 4 * ps)],
    }
    rows = summarize(threads, steps=2)
    assert rows == [OpTime("_MklMatMul", 6.0, 2), OpTime("Mul", 2.0, 1)]
    table = format_table(rows, steps=2)
    assert "of which matmul/conv 6.0 ms (75%)" in table
    assert "__inference" not in table


def table_rows(table: str) -> list[OpTime]:
    """The op rows of top_ops.txt, parsed back (kind, ms per step, calls)."""
    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("op "))
    rows = []
    for line in lines[start + 1 :]:
        kind, ms, _share, calls = line.rsplit(maxsplit=3)
        rows.append(OpTime(kind, float(ms), int(calls)))
    return rows


def assert_matmuls_traced(table: str, steps: int) -> None:
    """Rows of matmul kind ran at least once per traced step (not only the header says matmul)."""
    matmuls = [row for row in table_rows(table) if row.is_matmul]
    assert matmuls, table
    assert sum(row.calls for row in matmuls) >= steps, table


def test_profiler_window_rounds_to_boundaries_and_ends_with_training(tmp_path):
    profiler = StepProfiler(tmp_path / "profile", skip=3, steps=4)
    assert profiler.steps_until_boundary(1) == 2  # run only up to step 3 before starting
    assert profiler.after_steps(1) is False and profiler.started_at is None
    profiler.after_steps(3)
    assert profiler.started_at == 3
    assert profiler.steps_until_boundary(3) == 4
    assert profiler.stop(5) is True  # training ended inside the window
    assert profiler.traced_steps == 2 and profiler.done
    assert profiler.steps_until_boundary(5) is None and profiler.stop(6) is False


def test_profiled_run_writes_a_trace_and_an_op_table_to_the_run_dir_and_mlflow(cli_here, tmp_path):
    done = cli_here(*TINY, "precision=fp32", "xla=false", "train.profile.steps=4", "train.profile.skip_steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    profile = tmp_path / "run" / "profile"
    assert list(profile.rglob("*.xplane.pb"))
    table = (profile / "top_ops.txt").read_text()
    assert "traced steps: 4;" in table
    assert any("MatMul" in row.kind for row in table_rows(table))
    assert_matmuls_traced(table, steps=4)
    assert "Profile of 4 training step(s)" in done.stdout

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    run = client.search_runs([client.get_experiment_by_name("launcher").experiment_id])[0]
    assert "profile/top_ops.txt" in {a.path for a in client.list_artifacts(run.info.run_id, "profile")}


def test_profiled_xla_run_names_the_compiled_instructions(cli_here, tmp_path):
    done = cli_here(
        *TINY,
        "precision=fp32",
        "xla=true",
        "tracking.enabled=false",
        "train.profile.steps=4",
        "train.profile.skip_steps=1",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    table = (tmp_path / "run" / "profile" / "top_ops.txt").read_text()
    assert "traced steps: 4;" in table
    assert not any(row.kind.startswith("_Mkl") for row in table_rows(table))  # compiled, not TF's kernels
    assert_matmuls_traced(table, steps=4)


def test_waiting_is_not_counted_as_work():
    ps = 1_000_000_000
    rows = summarize({"tf_Compute/1": [Event("BlockUntilReady", 0, 9 * ps), Event("dot.3", 10 * ps, ps)]}, steps=1)
    assert [r.kind for r in rows] == ["dot"]


def test_a_trace_that_cannot_start_does_not_stop_training(tmp_path, capsys):
    import tensorflow as tf

    tf.profiler.experimental.start(str(tmp_path / "other"))  # someone else's trace is running
    try:
        profiler = StepProfiler(tmp_path / "profile", skip=0, steps=2)
        assert profiler.after_steps(1) is False
    finally:
        tf.profiler.experimental.stop()
    assert profiler.done and profiler.started_at is None
    assert "Profiling not started" in capsys.readouterr().out


def test_a_worker_that_does_not_trace_cuts_chunks_where_the_chief_does(tmp_path):
    chief = StepProfiler(tmp_path / "chief", skip=3, steps=4)
    worker = StepProfiler(tmp_path / "worker", skip=3, steps=4, trace=False)
    cuts = {"chief": [], "worker": []}
    for name, profiler in (("chief", chief), ("worker", worker)):
        step = 0
        while step < 12:
            step += profiler.steps_until_boundary(step) or 12 - step
            cuts[name].append(step)
            profiler.after_steps(step)
        profiler.stop(step)
    assert cuts["chief"] == cuts["worker"] == [3, 7, 12]
    assert chief.traced_steps == 4 and worker.traced_steps == 0
    assert not (tmp_path / "worker").exists()
