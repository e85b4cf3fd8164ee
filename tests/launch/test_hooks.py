"""Each hook alone, with fakes: the save rule, best model, metrics batching, preemption,
utilisation, the hook list, and the pure resume decision. No TensorFlow, no subprocess."""

from __future__ import annotations

import json
import math

import pytest

from launcher.contract import Hook, HookList, Position, Preempted
from launcher.launch.checkpoint_policy import SavePolicy
from launcher.launch.hooks.best_model import BestModelHook
from launcher.launch.hooks.checkpoint import CheckpointHook
from launcher.launch.hooks.history import HistoryHook
from launcher.launch.hooks.metrics import MetricsHook
from launcher.launch.hooks.preemption import PreemptionHook
from launcher.launch.hooks.utilization import UtilizationHook
from launcher.plan.resume import decide_resume


class FakeCheckpointer:
    def __init__(self):
        self.saves: list[tuple[int, dict]] = []
        self.best: list[int] = []

    def save(self, position, extra):
        self.saves.append((position.global_step, extra))

    def save_best(self, position):
        self.best.append(position.global_step)


class FakeGuard:
    def __init__(self, signum=None):
        self.signum = signum

    @property
    def requested(self):
        return self.signum is not None


class FakeTracker:
    run_id = "run-1"

    def __init__(self, logged_steps=()):
        self.calls: list[tuple[dict, int]] = []
        self._logged = set(logged_steps)

    def log_metrics(self, metrics, step):
        self.calls.append((dict(metrics), step))

    def logged_steps(self, metric):
        return set(self._logged)

    def flush(self):
        pass


# ------------------------------------------------------------- position


def test_position_prints_as_people_count():
    assert str(Position(epoch=2, step_in_epoch=5, global_step=50)) == "epoch 3, step 5 (global step 50)"


# ------------------------------------------------------------ save rule


@pytest.mark.parametrize(
    ("interval", "global_step", "until", "due"),
    [
        (5, 0, 5, True),
        (5, 3, 2, False),
        (5, 5, 5, True),
        (5, 7, 3, False),
        (0, 7, None, False),
    ],
)
def test_step_save_rule(interval, global_step, until, due):
    policy = SavePolicy(interval_steps=interval, interval_epochs=0)
    position = Position(global_step=global_step)
    assert policy.steps_until_save(position) == until
    assert policy.step_save_due(position) is due


@pytest.mark.parametrize(("interval", "epochs_done", "due"), [(1, 1, True), (2, 1, False), (2, 4, True), (0, 3, False)])
def test_epoch_save_rule(interval, epochs_done, due):
    assert SavePolicy(interval_steps=0, interval_epochs=interval).epoch_save_due(epochs_done) is due


def checkpoint_hook(interval_steps=5, interval_epochs=1, signum=None, stateful=()):
    fake = FakeCheckpointer()
    hook = CheckpointHook(
        fake, SavePolicy(interval_steps, interval_epochs), FakeGuard(signum), lambda position: 10, HookList(stateful)
    )
    return hook, fake


def test_checkpoint_hook_saves_at_step_multiples_inside_the_epoch_only():
    hook, fake = checkpoint_hook(interval_steps=5, interval_epochs=0)
    for step in (3, 5, 7, 10):  # step 10 is the epoch's last: its save waits for the epoch end
        hook.after_steps(Position(epoch=0, step_in_epoch=step, global_step=step), {})
    assert [s for s, _ in fake.saves] == [5]
    hook.on_epoch_end(Position(epoch=1, step_in_epoch=0, global_step=10), {})
    assert [s for s, _ in fake.saves] == [5, 10]


def test_checkpoint_hook_saves_once_when_a_signal_and_a_step_save_coincide():
    hook, fake = checkpoint_hook(interval_steps=5, signum=15)
    hook.after_steps(Position(epoch=0, step_in_epoch=5, global_step=5), {})
    assert len(fake.saves) == 1


def test_checkpoint_hook_saves_on_a_signal_between_save_points():
    hook, fake = checkpoint_hook(interval_steps=0, interval_epochs=0, signum=15)
    hook.after_steps(Position(epoch=0, step_in_epoch=3, global_step=3), {})
    assert [s for s, _ in fake.saves] == [3]


def test_checkpoint_hook_epoch_rule():
    hook, fake = checkpoint_hook(interval_steps=0, interval_epochs=2)
    hook.on_epoch_end(Position(epoch=1, global_step=10), {})
    hook.on_epoch_end(Position(epoch=2, global_step=20), {})
    assert [s for s, _ in fake.saves] == [20]


def test_checkpoint_sidecar_holds_the_state_of_every_stateful_hook_at_save_time():
    history = HistoryHook()
    hook, fake = checkpoint_hook(interval_steps=0, stateful=[history, MetricsHook(FakeTracker())])
    hooks = HookList([history, hook])
    hooks.on_epoch_end(Position(epoch=1, global_step=10), {"loss": 0.5})
    extra = fake.saves[0][1]
    assert extra == {"history": [{"epoch": 0, "global_step": 10, "loss": 0.5}], "mlflow_run_id": "run-1"}


def test_val_metrics_go_by_global_step_when_validating_inside_epochs_and_heal_the_same_way():
    tracker = FakeTracker(logged_steps={0})
    hook = MetricsHook(tracker, val_by_step=True)
    hook.on_validation(Position(epoch=0, step_in_epoch=10, global_step=10), {"val_loss": 0.9, "learning_rate": 0.1})
    hook.on_epoch_end(Position(epoch=1, global_step=23), {"loss": 0.7, "val_loss": 0.8})
    assert tracker.calls == [
        ({"val_loss": 0.9}, 10),
        ({"loss": 0.7, "global_step": 23}, 0),
        ({"val_loss": 0.8}, 23),
    ]
    tracker.calls.clear()
    hook.load_state({"history": [{"epoch": 0, "global_step": 23}, {"epoch": 1, "global_step": 46, "val_loss": 0.5}]})
    assert tracker.calls == [({"global_step": 46}, 1), ({"val_loss": 0.5}, 46)]  # epoch 0 was logged already


# ----------------------------------------------------------- best model


@pytest.mark.parametrize(
    ("mode", "values", "saved_epochs"),
    [
        ("min", [0.9, 0.7, 0.8, 0.6, float("nan")], [1, 2, 4]),
        ("max", [0.1, 0.3, 0.2, 0.3, 0.5], [1, 2, 5]),
    ],
)
def test_best_model_hook_saves_only_on_improvement(mode, values, saved_epochs):
    fake = FakeCheckpointer()
    hook = BestModelHook("val_x", mode, checkpointer=fake)
    for epoch, value in enumerate(values, start=1):
        hook.on_epoch_end(Position(epoch=epoch, global_step=epoch * 10), {"val_x": value})
    assert fake.best == [e * 10 for e in saved_epochs]
    finite = [v for v in values if math.isfinite(v)]
    assert hook.best["value"] == (min(finite) if mode == "min" else max(finite))
    assert hook.best["epoch"] == saved_epochs[-1] - 1


def test_best_model_hook_resumes_against_the_saved_best():
    fake = FakeCheckpointer()
    hook = BestModelHook("val_loss", "min", checkpointer=fake)
    hook.load_state({"best": {"monitor": "val_loss", "value": 0.5, "epoch": 3}})
    hook.on_epoch_end(Position(epoch=5, global_step=50), {"val_loss": 0.6})
    assert fake.best == []
    assert hook.state()["best"]["value"] == 0.5


def test_a_best_kept_by_another_metric_or_direction_starts_over_when_the_run_continues():
    """checkpoint.monitor may change when a run continues: the earlier best, by another measure, is not compared."""
    for earlier in ({"monitor": "val_loss", "mode": "min", "value": 0.5}, {"monitor": "val_accuracy", "mode": "min"}):
        fake = FakeCheckpointer()
        hook = BestModelHook("val_accuracy", "max", checkpointer=fake)
        hook.load_state({"best": {**earlier, "value": 0.5, "epoch": 3}})
        hook.on_epoch_end(Position(epoch=5, global_step=50), {"val_accuracy": 0.2})
        assert fake.best == [50] and hook.state()["best"]["value"] == 0.2


def test_best_model_hook_ignores_epochs_without_the_metric():
    fake = FakeCheckpointer()
    BestModelHook("val_loss", "min", checkpointer=fake).on_epoch_end(Position(epoch=1), {"loss": 0.1})
    assert fake.best == []


# -------------------------------------------------------------- metrics


def test_metrics_hook_logs_each_epoch_in_one_batch_keyed_by_epoch():
    tracker = FakeTracker()
    hook = MetricsHook(tracker)
    hook.on_epoch_end(Position(epoch=1, global_step=10), {"loss": 1.0, "val_loss": 1.1, "accuracy": 0.5})
    hook.on_epoch_end(Position(epoch=2, global_step=20), {"loss": 0.8, "val_loss": 0.9, "accuracy": 0.6})
    assert tracker.calls == [
        ({"loss": 1.0, "val_loss": 1.1, "accuracy": 0.5, "global_step": 10}, 0),
        ({"loss": 0.8, "val_loss": 0.9, "accuracy": 0.6, "global_step": 20}, 1),
    ]


def test_metrics_hook_relogs_only_the_epochs_mlflow_missed():
    tracker = FakeTracker(logged_steps={0})
    hook = MetricsHook(tracker)
    hook.load_state({"history": [{"epoch": 0, "loss": 1.0}, {"epoch": 1, "loss": 0.8}]})
    assert tracker.calls == [({"loss": 0.8}, 1)]
    assert hook.healed == 1


def test_tracker_sends_params_and_tags_in_batches_of_at_most_100(tmp_path):
    from launcher.tracking.tracker import Tracker

    tracker = Tracker(f"sqlite:///{tmp_path}/m.db", "batches", "r", tmp_path / "artifacts")
    sent = []
    real = tracker.client.log_batch
    tracker.client.log_batch = lambda run_id, **kw: (
        sent.append({k: len(v) for k, v in kw.items()}),
        real(run_id, **kw),
    )
    tracker.log_params({f"p{i:03d}": i for i in range(250)})
    tracker.set_tags({f"t{i}": "x" for i in range(101)})
    tracker.flush()
    assert sent == [{"params": 100}, {"params": 100}, {"params": 50}, {"tags": 100}, {"tags": 1}]
    run = tracker.client.get_run(tracker.run_id)
    assert len(run.data.params) == 250 and run.data.params["p249"] == "249"


# ----------------------------------------------------------- preemption


def test_preemption_hook_stops_mid_epoch_and_at_the_epoch_end_but_not_on_the_last_step():
    quiet = PreemptionHook(FakeGuard(None), lambda position: 10)
    quiet.after_steps(Position(step_in_epoch=3), {})
    quiet.on_epoch_end(Position(epoch=1), {})
    hook = PreemptionHook(FakeGuard(15), lambda position: 10)
    hook.after_steps(Position(step_in_epoch=10, global_step=10), {})  # waits for the epoch end
    with pytest.raises(Preempted, match="signal 15 at epoch 1, step 3") as stop:
        hook.after_steps(Position(step_in_epoch=3, global_step=3), {})
    assert stop.value.signum == 15
    with pytest.raises(Preempted):
        hook.on_epoch_end(Position(epoch=1, global_step=10), {})


# ---------------------------------------------------------- utilisation


def test_utilization_hook_adds_mfu_every_epoch_and_time_to_first_step_once():
    ticks = iter([4.5, 99.0])
    hook = UtilizationHook(flops_per_example=2e6, peak_flops=1e9, clock=lambda: next(ticks))
    hook.after_steps(Position(global_step=1), {})
    hook.after_steps(Position(global_step=2), {})
    first, second = {"examples_per_sec": 100.0}, {"examples_per_sec": 250.0}
    hook.on_epoch_end(Position(epoch=1), first)
    hook.on_epoch_end(Position(epoch=2), second)
    assert first == {"examples_per_sec": 100.0, "model_flops_utilization": 0.2, "time_to_first_step_sec": 4.5}
    assert second == {"examples_per_sec": 250.0, "model_flops_utilization": 0.5}


def test_utilization_hook_without_flops_adds_no_mfu():
    logs = {"examples_per_sec": 100.0}
    UtilizationHook(0.0, 0.0, clock=lambda: None).on_epoch_end(Position(epoch=1), logs)
    assert logs == {"examples_per_sec": 100.0}


# ------------------------------------------------------------ hook list


class Recorder(Hook):
    def __init__(self, name, calls, boundary=None, state=None):
        self.name, self.calls, self.boundary, self._state = name, calls, boundary, state or {}

    def steps_until_boundary(self, position):
        return self.boundary

    def on_epoch_end(self, position, logs):
        self.calls.append(self.name)
        logs[self.name] = len(self.calls)

    def state(self):
        return self._state

    def load_state(self, state):
        self.calls.append(("load", self.name, dict(state)))


def test_hook_list_calls_in_order_takes_the_nearest_boundary_and_merges_state():
    calls: list = []
    hooks = HookList(
        [
            Recorder("a", calls, boundary=None, state={"x": 1}),
            Recorder("b", calls, boundary=7, state={"y": 2}),
            Recorder("c", calls, boundary=3),
        ]
    )
    logs: dict = {}
    hooks.on_epoch_end(Position(epoch=1), logs)
    assert calls == ["a", "b", "c"]
    assert logs == {"a": 1, "b": 2, "c": 3}  # later hooks see what earlier ones added
    assert hooks.steps_until_boundary(Position()) == 3
    assert hooks.state() == {"x": 1, "y": 2}
    hooks.load_state({"x": 5})
    assert calls[-3:] == [("load", n, {"x": 5}) for n in "abc"]
    assert HookList([Recorder("a", [])]).steps_until_boundary(Position()) is None


# --------------------------------------------------------------- resume


LAYOUT = {"strategy": "default", "replicas": 1, "global_batch": 64}


def test_resume_with_the_same_layout_continues_where_it_stopped():
    saved = Position(epoch=1, step_in_epoch=5, global_step=27)
    decision = decide_resume(saved, dict(LAYOUT), dict(LAYOUT))
    assert decision.position == saved
    assert decision.value == "epoch 2, step 5 (global step 27)"
    assert "same strategy" in decision.reason and decision.warning is None


def test_resume_under_more_replicas_with_the_same_global_batch_keeps_the_data_position():
    now = {"strategy": "mirrored", "replicas": 2, "global_batch": 64}
    decision = decide_resume(Position(epoch=1, step_in_epoch=5, global_step=27), dict(LAYOUT), now)
    assert decision.position.step_in_epoch == 5
    assert "allowed" in decision.reason and "replicas=1" in decision.reason and "replicas=2" in decision.reason
    assert decision.warning is None


def test_resume_with_another_global_batch_rounds_the_data_position_down_and_warns():
    now = {"strategy": "mirrored", "replicas": 2, "global_batch": 128}
    saved = Position(epoch=1, step_in_epoch=5, global_step=27)
    decision = decide_resume(saved, dict(LAYOUT), now)
    assert decision.position == Position(epoch=1, step_in_epoch=2, global_step=27)  # 320 examples -> 2 x 128
    assert "320 examples" in decision.reason and "2 whole batches of 128" in decision.reason
    assert "not step-for-step identical" in decision.warning
    assert saved.step_in_epoch == 5  # the saved position is not mutated


def test_resume_at_an_epoch_boundary_needs_no_rounding():
    now = {"strategy": "default", "replicas": 1, "global_batch": 128}
    decision = decide_resume(Position(epoch=2, step_in_epoch=0, global_step=44), dict(LAYOUT), now)
    assert decision.position.step_in_epoch == 0 and decision.warning is None


def test_tracker_queues_writes_in_order_off_the_calling_thread_and_raises_a_refused_one_at_flush(tmp_path):
    import threading

    from launcher.tracking.tracker import Tracker

    tracker = Tracker(f"sqlite:///{tmp_path}/m.db", "queue", "r", tmp_path / "artifacts")
    threads, real = [], tracker.client.log_batch
    tracker.client.log_batch = lambda run_id, **kw: (
        threads.append(threading.current_thread().name),
        real(run_id, **kw),
    )
    for step in range(30):
        tracker.log_metrics({"step/loss": 1.0 / (step + 1)}, step=step)
    tracker.flush()
    assert set(threads) == {"mlflow-delivery"}
    history = tracker.client.get_metric_history(tracker.run_id, "step/loss")
    assert [m.step for m in history] == list(range(30))
    tracker.log_params({"a": 1})
    tracker.log_params({"a": 2})  # MLflow refuses changing a param
    with pytest.raises(Exception, match="(?i)param"):
        tracker.flush()
    tracker.log_metrics({"after": 1.0}, step=0)  # the writes after a refused one still go
    tracker.end()
    run = tracker.client.get_run(tracker.run_id)
    assert run.data.metrics["after"] == 1.0 and run.info.status == "FINISHED"


# ---------------------------------------------------------- step metrics


def test_step_metrics_cut_chunks_at_the_interval_and_log_the_interval_mean_with_the_optimizer_state():
    """The loss is the interval's mean; a task metric (accuracy) is the epoch-to-date value the chunks report."""
    from launcher.launch.hooks.step_metrics import StepMetricsHook

    tracker, reads = FakeTracker(), []
    hook = StepMetricsHook(tracker, every=10, read_optimizer=lambda: reads.append(1) or {"learning_rate": 0.1})
    assert hook.steps_until_boundary(Position(global_step=0)) == 10
    assert hook.steps_until_boundary(Position(global_step=7)) == 3
    hook.after_steps(Position(global_step=1), {"loss": 4.0, "accuracy": 0.0, "examples": 32.0})  # compile step
    hook.after_steps(Position(global_step=7), {"loss": 1.0, "accuracy": 0.5, "examples": 192.0})
    assert tracker.calls == [] and reads == []  # not at a multiple: nothing read, nothing logged
    hook.after_steps(Position(global_step=10), {"loss": 2.0, "accuracy": 1.0, "examples": 96.0})
    ((point, step),) = tracker.calls
    assert step == 10 and reads == [1]
    assert point == pytest.approx(
        {
            "step/loss": (4 * 32 + 1 * 192 + 2 * 96) / 320,
            "step/accuracy": 1.0,
            "step/learning_rate": 0.1,
            "step/skipped_steps": 0.0,
        }
    )
    hook.after_steps(Position(global_step=20), {"loss": 3.0, "accuracy": 0.25, "examples": 320.0})
    assert tracker.calls[-1] == (
        {"step/loss": 3.0, "step/accuracy": 0.25, "step/learning_rate": 0.1, "step/skipped_steps": 0.0},
        20,
    )


def test_step_metrics_on_a_worker_that_does_not_log_still_cut_chunks_but_read_nothing():
    from launcher.launch.hooks.step_metrics import StepMetricsHook
    from launcher.tracking.tracker import NullTracker

    hook = StepMetricsHook(NullTracker(), every=4, read_optimizer=lambda: pytest.fail("read on a silent worker"))
    assert hook.steps_until_boundary(Position(global_step=2)) == 2
    hook.after_steps(Position(global_step=4), {"loss": 1.0, "accuracy": 1.0, "examples": 8.0})


# ------------------------------------------------ multi-worker stop agreement


def test_a_signal_on_one_worker_stops_every_worker_at_the_same_boundary():
    """Two guards stand for two workers; `agree` is the collective (any worker's signal, seen by all)."""
    from launcher.launch.hooks.preemption import PreemptionGuard, StopAgreementHook

    guards = [PreemptionGuard(enabled=False), PreemptionGuard(enabled=False)]
    for guard in guards:
        guard.agree = lambda _mine: next((g.received for g in guards if g.received), None)
    guards[1].received = 15  # SIGTERM reached worker 1 only, in the middle of a chunk
    assert not any(g.requested for g in guards)  # nothing acts on it before the workers agree
    hooks = [
        HookList(
            [
                StopAgreementHook(g),
                CheckpointHook(FakeCheckpointer(), SavePolicy(0, 0), g, lambda position: 10),
                PreemptionHook(g, lambda position: 10),
            ]
        )
        for g in guards
    ]
    for hook in hooks:
        with pytest.raises(Preempted) as stop:
            hook.after_steps(Position(0, 4, 4), {})
        assert stop.value.signum == 15 and stop.value.position.global_step == 4
    assert [h.hooks[1].checkpointer.saves[0][0] for h in hooks] == [4, 4]  # both saved at step 4


# ------------------------------------------------------------ the hook list of a fit


def fit_config(monitor="", profile_steps=0, step_metrics_every=0):
    from types import SimpleNamespace as NS

    return NS(
        checkpoint=NS(monitor=monitor, mode=NS(value="min"), export_model=False, interval_steps=0, interval_epochs=1),
        train=NS(measure_utilization=False, profile=NS(steps=profile_steps, skip_steps=0)),
        tracking=NS(enabled=True, step_metrics_every=step_metrics_every),
    )


def fit_plan(max_time=None, faulted=False, best_by=None):
    """`best_by`: the Plan's checkpoint.monitor (the config's, as resolved: auto is the objective)."""
    from types import SimpleNamespace as NS

    schedule = NS(
        max_time_seconds=max_time, val_every_steps=None, steps_in_epoch=lambda p: 10, total_steps=20, max_steps=None
    )
    task = NS(best_by=best_by, best_mode="min" if best_by else None)
    return NS(schedule=schedule, task=task, is_chief=True, has=lambda section: faulted)


class FakeAgreement:
    def any_stop(self, signum):
        return signum


def fit_context(tmp_path, config, plan, built, tracker, *, env=None, checkpointer=None, agreement=None, trial=None):
    """A training launch's context as far as the fit step, with the given pieces (fakes)."""
    from types import SimpleNamespace as NS

    from launcher.launch.context import LaunchContext, Restored

    return LaunchContext(
        config,
        {},
        {},
        tmp_path,
        tmp_path,
        tmp_path / "checkpoints",
        plan=plan,
        prepared=NS(env=env, trial=trial),
        built=built,
        restored=Restored(plan, checkpointer),
        agreement=agreement,
        tracker=tracker,
    )


def test_hooks_for_puts_stops_first_state_before_the_save_and_the_preemption_stop_last(tmp_path):
    from types import SimpleNamespace as NS

    from launcher.launch.hooks import assembly
    from launcher.launch.hooks.preemption import PreemptionGuard

    guard = PreemptionGuard(enabled=False)
    built = NS(model=None, optimizer=None)
    context = fit_context(
        tmp_path,
        fit_config(monitor="val_loss", profile_steps=2, step_metrics_every=5),
        fit_plan(max_time=60, best_by="val_loss"),
        built,
        FakeTracker(),
        env=NS(matmul_gflops={}),
        checkpointer=FakeCheckpointer(),
        agreement=FakeAgreement(),
        trial=NS(objective="val_loss"),
    )
    fit = assembly.hooks_for(context, guard)
    names = [type(h).__name__ for h in fit.hooks.hooks]
    assert names == [
        "TimeBudgetHook",
        "StopAgreementHook",
        "UtilizationHook",
        "ProfilerHook",
        "HistoryHook",
        "BestModelHook",
        "CallbackStateHook",
        "PruningHook",
        "CheckpointHook",
        "StepMetricsHook",
        "MetricsHook",
        "PreemptionHook",
    ]
    assert guard.agree is not None  # the workers' agreement is what the guard asks at each boundary
    assert fit.best is fit.hooks.hooks[5] and fit.metrics is fit.hooks.hooks[10] and fit.pruning is fit.hooks.hooks[7]


def test_hooks_for_a_plain_fit_has_only_what_every_fit_needs(tmp_path):
    from types import SimpleNamespace as NS

    from launcher.contract import FitResult
    from launcher.launch.hooks.assembly import hooks_for
    from launcher.launch.hooks.preemption import PreemptionGuard

    plan = fit_plan()
    context = fit_context(tmp_path, fit_config(), plan, NS(model=None), FakeTracker())
    fit = hooks_for(context, PreemptionGuard(enabled=False))
    names = [type(h).__name__ for h in fit.hooks.hooks]
    assert names == ["UtilizationHook", "HistoryHook", "CallbackStateHook", "MetricsHook", "PreemptionHook"]
    assert fit.best is None and fit.pruning is None
    assert fit.stop_tags(FitResult(stopped_early=True), plan.schedule) == {"stop_reason": "early_stopping"}
    assert fit.stop_reason(FitResult(), plan.schedule) == "epochs"


def test_a_pruned_trial_says_where_it_stopped_and_the_steps_it_saved():
    from launcher.contract import FitResult
    from launcher.launch.hooks.assembly import FitHooks
    from launcher.launch.hooks.pruning import PruningHook

    pruning = PruningHook(trial=None, by_global_step=False)
    assert pruning.tags(total_steps=20) == {}
    pruning.pruned_at = (Position(epoch=1, step_in_epoch=0, global_step=8), 0.51234567)
    fit = FitHooks(HookList([pruning]), metrics=None, best=None, pruning=pruning)
    schedule = fit_plan().schedule
    assert fit.stop_tags(FitResult(stopped_early=True), schedule) == {
        "stop_reason": "pruned",
        "pruned": "true",
        "pruned.epoch": "1",
        "pruned.global_step": "8",
        "pruned.value": "0.512346",
        "pruned.steps_saved": "12",
    }


def test_callback_state_carries_early_stopping_and_plateau_counts_across_a_resume():
    import keras

    from launcher.launch.hooks.callback_state import CallbackStateHook

    def callbacks():
        return keras.callbacks.CallbackList(
            [keras.callbacks.EarlyStopping(patience=5), keras.callbacks.ReduceLROnPlateau(patience=3)]
        )

    before, hook = callbacks(), CallbackStateHook()
    early, plateau = before.callbacks
    early.wait, early.best, early.best_epoch, plateau.wait, plateau.best = 2, 0.5, 3, 1, 0.25
    hook.on_train_begin(Position(), before)
    sidecar = json.loads(json.dumps(hook.state()))  # through the checkpoint's JSON sidecar

    resumed, again = callbacks(), CallbackStateHook()
    again.load_state(sidecar)
    again.on_train_begin(Position(), resumed)
    early, plateau = resumed.callbacks
    assert (early.wait, early.best, early.best_epoch, plateau.wait, plateau.best) == (2, 0.5, 3, 1, 0.25)
