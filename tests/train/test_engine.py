"""The engine drives standard Keras callbacks and reports what a person needs.

The callbacks from the config: `launcher.train.callbacks`.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.config import TINY, compose
from support.train import QUIET, engine_for

from launcher.contract import Hook, HookList, Preempted
from launcher.launch.training import execute
from launcher.train.engine import Engine

ORIGINAL_ITERATOR = Engine._iterator


def run(tmp_path, *overrides):
    outcome = execute(compose(*TINY, *QUIET, *overrides), tmp_path / "run", tmp_path)
    assert outcome.error is None
    return outcome


@pytest.mark.slow  # a training of many epochs, seconds of CPU in this process
def test_early_stopping_stops_the_run(tmp_path):
    # mode=max on a falling val_loss: "no improvement" after the first epoch.
    outcome = run(
        tmp_path,
        "train.epochs=6",
        "train.early_stopping.enabled=true",
        "train.early_stopping.patience=1",
        "train.early_stopping.mode=max",
    )
    assert len(outcome.result.epochs) == 2
    assert outcome.result.stopped_early


@pytest.mark.slow  # a training of many epochs, seconds of CPU in this process
def test_reduce_lr_on_plateau_lowers_the_learning_rate(tmp_path):
    outcome = run(
        tmp_path,
        "train.epochs=3",
        "train.reduce_lr_on_plateau.enabled=true",
        "train.reduce_lr_on_plateau.patience=0",
        "train.reduce_lr_on_plateau.mode=max",
        "train.reduce_lr_on_plateau.factor=0.5",
        "optimizer.learning_rate=0.002",
    )
    # Logged per epoch: the rate that epoch trained with. Epoch 1 sets the best value,
    # epochs 2 and 3 "do not improve", each halving the rate for what follows.
    rates = [e.logs["learning_rate"] for e in outcome.result.epochs]
    assert rates == pytest.approx([0.002, 0.002, 0.001])


@pytest.mark.slow  # several trainings, seconds of CPU in this process
def test_warmup_and_linear_scaling_drive_the_learning_rate(tmp_path):
    outcome = run(
        tmp_path,
        "strategy=mirrored",
        "scaling=linear",
        "scaling.batch_size=32",
        "scaling.reference_batch=32",
        "scaling.warmup_epochs=1",
        "optimizer.learning_rate=0.001",
        "train.epochs=2",
    )
    plan = outcome.plan
    assert plan.learning_rate.peak == pytest.approx(0.002)
    assert plan.schedule.warmup_steps == plan.schedule.steps_per_epoch
    assert outcome.result.epochs[-1].logs["learning_rate"] == pytest.approx(0.002)


@pytest.mark.slow  # a training of many epochs, seconds of CPU in this process
def test_cosine_schedule_decays(tmp_path):
    outcome = run(tmp_path, "optimizer.schedule=cosine", "train.epochs=3", "optimizer.learning_rate=0.01")
    rates = [e.logs["learning_rate"] for e in outcome.result.epochs]
    assert rates[0] > rates[1] > rates[2]


def test_the_loss_scale_grows_and_the_logged_value_is_the_optimizers(tmp_path):
    outcome = run(tmp_path, "precision=mixed", "xla=false", "loss_scale.growth_interval=20")
    optimizer = outcome.model.optimizer
    scales = [e.logs["loss_scale"] for e in outcome.result.epochs]
    # 45 finite steps per epoch with a growth interval of 20: the scale doubled during epoch 1.
    assert scales[0] > 32768.0
    assert scales[-1] == float(optimizer.dynamic_scale.numpy())
    assert outcome.result.final["examples_per_sec"] > 0


# ------------------------------------------------- engine + recording hooks


class RecordingHook(Hook):
    """Asks for control every `every` global steps and records what the engine calls."""

    def __init__(self, every: int, stop_at: int | None = None):
        self.every, self.stop_at = every, stop_at
        self.calls: list = []

    def on_train_begin(self, position, callbacks):
        self.calls.append(("begin", str(position)))

    def steps_until_boundary(self, position):
        return self.every - position.global_step % self.every

    def after_steps(self, position, logs):
        self.calls.append(("steps", position.global_step))
        if self.stop_at is not None and position.global_step >= self.stop_at:
            raise Preempted(15, position)

    def on_epoch_end(self, position, logs):
        self.calls.append(("epoch", position.epoch, sorted(k for k in ("loss", "val_loss") if k in logs)))

    def on_train_end(self, position):
        self.calls.append(("end", position.global_step))


def test_engine_calls_hooks_in_order_and_cuts_chunks_at_their_boundaries(tmp_path):
    hook = RecordingHook(every=3)
    result = engine_for(tmp_path, "train.steps_per_execution=4").fit(2, hooks=HookList([hook]))
    # The first call runs one step; then chunks of at most 4 end at every multiple of 3 and at
    # the epoch's end (10 steps per epoch).
    assert hook.calls == [
        ("begin", "epoch 1, step 0 (global step 0)"),
        ("steps", 1),
        ("steps", 3),
        ("steps", 6),
        ("steps", 9),
        ("steps", 10),
        ("epoch", 1, ["loss", "val_loss"]),
        ("steps", 12),
        ("steps", 15),
        ("steps", 18),
        ("steps", 20),
        ("epoch", 2, ["loss", "val_loss"]),
        ("end", 20),
    ]
    assert len(result.epochs) == 2


def test_without_boundaries_chunks_are_steps_per_execution(tmp_path):
    hook = RecordingHook(every=10_000)
    engine_for(tmp_path, "train.steps_per_execution=4").fit(1, hooks=hook)
    assert [c[1] for c in hook.calls if c[0] == "steps"] == [1, 5, 9, 10]


def test_an_engine_without_validation_trains_the_same_chunks_and_never_evaluates(tmp_path):
    """What the step timing of tune=auto runs: the epochs' logs have the training loss and no val_*, and the
    evaluation is never traced."""
    hook = RecordingHook(every=10_000)
    engine = engine_for(tmp_path, "train.steps_per_execution=4", validate=False)
    engine.fit(1, hooks=hook)
    assert [c[1] for c in hook.calls if c[0] == "steps"] == [1, 5, 9, 10]
    assert ("epoch", 1, ["loss"]) in hook.calls
    assert engine._eval_chunk.experimental_get_tracing_count() == 0


def test_a_hook_that_stops_training_stops_it_at_that_step(tmp_path):
    hook = RecordingHook(every=2, stop_at=4)
    with pytest.raises(Preempted) as stop:
        engine_for(tmp_path, "train.steps_per_execution=4").fit(2, hooks=hook)
    assert stop.value.position.global_step == 4
    assert ("epoch", 1, ["loss", "val_loss"]) not in hook.calls


def test_fit_resumes_from_a_position_inside_an_epoch(tmp_path):
    from launcher.contract import Position

    hook = RecordingHook(every=10_000)
    result = engine_for(tmp_path, "train.steps_per_execution=4").fit(
        2, start=Position(epoch=1, step_in_epoch=6, global_step=16), hooks=hook
    )
    assert hook.calls[0] == ("begin", "epoch 2, step 6 (global step 16)")
    assert [c[1] for c in hook.calls if c[0] == "steps"] == [17, 20]
    assert [e.epoch for e in result.epochs] == [1]


class StopAt(Hook):
    def __init__(self, model, step):
        self.model, self.step = model, step

    def after_steps(self, position, logs):
        if position.global_step >= self.step:
            self.model.stop_training = True


def test_a_fit_from_where_the_last_stopped_continues_its_iterator_and_trains_as_one_fit(tmp_path, monkeypatch):
    """tune=auto's rounds stop a fit inside an epoch and fit again from there: the iterator goes on (dropping it
    blocked ~0.3 s) and the batches are those one uninterrupted fit trains on; any other start builds a new one."""
    from launcher.contract import Position
    from launcher.train.engine import Engine

    built = []
    monkeypatch.setattr(Engine, "_iterator", lambda self, *a, **k: built.append(a) or ORIGINAL_ITERATOR(self, *a, **k))
    whole = engine_for(tmp_path / "whole", "train.steps_per_execution=2", validate=False)
    whole.fit(1)
    paused = engine_for(tmp_path / "paused", "train.steps_per_execution=2", validate=False)
    position = Position()
    built.clear()
    for stop in (3, 7):
        paused.fit(1, start=position, hooks=StopAt(paused.model, stop))
        assert position.step_in_epoch == stop and paused.model.stop_training
    paused.fit(1, start=position)
    assert built == [("train", 0)] and position.epoch == 1
    for ours, theirs in zip(paused.model.weights, whole.model.weights, strict=True):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    # Another position (a restored checkpoint's, say) reads from a new iterator.
    paused.fit(1, start=Position(epoch=0, step_in_epoch=4, global_step=4), hooks=StopAt(paused.model, 6))
    paused.fit(1, start=Position(epoch=0, step_in_epoch=2, global_step=2), hooks=StopAt(paused.model, 3))
    assert built[1:] == [("train", 0), ("train", 0)]


def test_an_epochs_spent_iterators_are_dropped_off_the_training_thread(tmp_path, monkeypatch):
    """Dropping a tf.data iterator whose autotuning runs blocked the training thread 0.5-1.1 s at 3 of 5 epoch
    ends (benchmarks/epoch_boundary.py): each epoch's training and validation iterators are let go on a thread
    of their own, and none is kept."""
    import threading
    import weakref

    from launcher.train.engine import Engine

    dropped_on = []

    def watched(iterator):
        weakref.finalize(iterator, lambda: dropped_on.append(threading.current_thread().name))
        return iterator

    distributed = Engine._distributed
    monkeypatch.setattr(Engine, "_distributed", lambda self, *a, **k: watched(distributed(self, *a, **k)))
    engine = engine_for(tmp_path, "train.steps_per_execution=4")
    engine.fit(2)
    for thread in threading.enumerate():
        if thread.name == "launcher-drop-iterator":
            thread.join(timeout=30)
    assert len(dropped_on) >= 4, dropped_on  # two epochs: a training and a validation iterator each
    assert set(dropped_on) == {"launcher-drop-iterator"}, dropped_on


def test_config_data_and_tracking_problems_are_refused_in_one_message(tmp_path):
    from launcher.config.errors import ConfigError

    cfg = compose(
        *QUIET,
        "tracking.enabled=true",
        "xla=perhaps",
        "strategy=mirrored",
        "scaling.batch_size=5000",
        "tracking.uri=http://127.0.0.1:9",
    )
    with pytest.raises(ConfigError) as err:
        execute(cfg, tmp_path / "run", tmp_path)
    assert [v.key for v in err.value.violations] == ["xla", "scaling.batch_size", "tracking.uri"]
    assert "no larger than the 1438 training examples" in str(err.value)
    assert not (tmp_path / "run" / "plan.yaml").exists()


class LearningRateRecorder(Hook):
    def __init__(self, optimizer):
        self.optimizer, self.rates = optimizer, {}

    def after_steps(self, position, logs):
        # The rate the optimizer applies at its next step (its iteration count = global step).
        self.rates[position.global_step] = float(self.optimizer.learning_rate)


def test_warmup_ramps_the_scaled_learning_rate_step_by_step(tmp_path):
    engine = engine_for(
        tmp_path,
        "strategy=mirrored",
        "scaling=linear",
        "scaling.reference_batch=32",
        "optimizer.learning_rate=0.001",
        "scaling.warmup_epochs=0",
        "scaling.warmup_steps=8",
        "train.steps_per_execution=1",
    )
    assert engine.plan.learning_rate.peak == pytest.approx(0.002)  # linear rule: 2 replicas x 32 vs reference 32
    recorder = LearningRateRecorder(engine.optimizer)
    engine.fit(1, hooks=recorder)
    # Step k (0-based) trains at 0.002 * (k + 1) / 8 during warmup, then at 0.002.
    expected = {k: 0.002 * min((k + 1) / 8, 1.0) for k in range(1, 11)}
    assert recorder.rates == pytest.approx(expected)


def test_the_chunk_loops_converted_ahead_are_the_ones_a_run_traces(tmp_path, monkeypatch):
    """What a forkserver prepares before it forks (`convert_chunk_loops`, in `forkserver.server.PREPARE`) is AutoGraph's
    conversion of the loops a launch traces: after it, training converts neither loop again (each launch the
    server forks skips ~1 CPU-s). Fails when the conversion is keyed otherwise than tf.function looks it up."""
    from tensorflow.python.autograph.impl import api
    from tensorflow.python.autograph.pyct import cache, transpiler

    from launcher.forkserver.server import PREPARE
    from launcher.train.steps import convert_chunk_loops

    monkeypatch.setattr(api._TRANSPILER, "_cache", cache.CodeObjectCache())  # empty, as in a new process
    converted: list[str] = []
    rewrite = transpiler.GenericTranspiler.transform_function  # what runs on a miss only

    def recorded(self, fn, user_context):
        converted.append(fn.__qualname__)
        return rewrite(self, fn, user_context)

    monkeypatch.setattr(transpiler.GenericTranspiler, "transform_function", recorded)
    assert "launcher.train.steps:convert_chunk_loops" in PREPARE
    convert_chunk_loops()
    loops = {"train_loop.<locals>.train_chunk", "eval_loop.<locals>.eval_chunk"}
    assert set(converted) == loops
    converted.clear()
    run(tmp_path, "train.epochs=1", "train.steps_per_execution=4")
    assert converted, "the run converted nothing at all: the recording does not see conversions"
    assert not loops & set(converted), converted


def test_an_epochs_throughput_leaves_out_the_step_that_compiled():
    from launcher.train.engine import steady_rate

    # 10 steps of 32 examples in 12 s, the first (the compile) took 10.2 s: 288 examples in 1.8 s.
    assert steady_rate(320, 12.0, 32, 10.2) == pytest.approx(160.0)
    assert steady_rate(320, 12.0, 0, 0.0) == pytest.approx(320 / 12.0)  # a later epoch: nothing compiled
    assert steady_rate(32, 10.2, 32, 10.2) == pytest.approx(32 / 10.2)  # the compile was the whole epoch
