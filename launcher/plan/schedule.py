"""The decisions that depend on the data's size: steps per epoch, validation steps, warmup.

Pure, like the resolver; called once the dataset is loaded and its split sizes are known.
"""

from __future__ import annotations

import math

from launcher.config.durations import parse_duration, show_duration
from launcher.config.errors import ConfigError
from launcher.config.imports import is_import_path
from launcher.config.optimizers import SCHEDULES
from launcher.config.schema import Config
from launcher.plan.decisions import Plan, SchedulePlan


def schedule(config: Config, plan: Plan, num_train: int, num_val: int, num_test: int = 0) -> Plan:
    """The Plan with the data-dependent decisions added (steps per epoch, validation, test and warmup steps)."""
    global_batch = plan.batch.global_batch
    drop = plan.batch.drop_remainder
    steps = num_train // global_batch if drop else math.ceil(num_train / global_batch)
    if num_train < global_batch:  # whatever the step: one ragged batch is not what was asked (issue 62, item 3)
        raise ConfigError.single(
            "scaling.batch_size",
            config.scaling.batch_size,
            f"a global batch ({global_batch}) no larger than the {num_train} training examples",
            f"scaling.batch_size={max(1, num_train // plan.strategy.replicas // 2)}",
        )
    reason = f"{num_train} training examples / global batch {global_batch}"
    fraction = config.train.limit_fraction
    limited = 0 < fraction < 1
    if limited:
        steps = max(1, round(steps * fraction))
        reason = f"train.limit_fraction={fraction:g} of {reason}"
    if config.train.max_steps_per_epoch and config.train.max_steps_per_epoch < steps:
        steps = config.train.max_steps_per_epoch
        reason = f"capped by train.max_steps_per_epoch ({reason})"
    val_steps = max(1, math.ceil(num_val / global_batch))
    val_reason = f"{num_val} validation examples, every one evaluated"
    if limited:
        val_steps, val_reason = max(1, round(val_steps * fraction)), f"train.limit_fraction={fraction:g} of {val_steps}"
    if config.train.max_validation_steps and config.train.max_validation_steps < val_steps:
        val_steps, val_reason = (
            config.train.max_validation_steps,
            f"capped by train.max_validation_steps ({val_reason})",
        )
    profile = config.train.profile
    if profile.steps > 0 and profile.skip_steps >= steps * config.train.epochs:
        plan = plan.with_warning(
            f"train.profile.skip_steps={profile.skip_steps} is not below the run's {steps * config.train.epochs} "
            f"training steps: nothing will be traced. Use train.profile.skip_steps={min(10, steps // 2)}."
        )
    sc = config.scaling
    if math.isfinite(sc.warmup_epochs) and sc.warmup_epochs > 0:  # inf/NaN: refused by the bounds rule
        warmup = (round(sc.warmup_epochs * steps), f"{sc.warmup_epochs:g} epoch(s) x {steps} steps")
    else:
        warmup = (sc.warmup_steps, "requested" if sc.warmup_steps else "no warmup")
    epochs, total = config.train.epochs, steps * config.train.epochs
    total_all = total
    total_reason, epochs_reason = f"{epochs} epoch(s)", "requested"
    max_steps = config.train.max_steps
    if max_steps and max_steps < total:
        total, epochs = max_steps, math.ceil(max_steps / steps)
        last = max_steps - (epochs - 1) * steps
        total_reason = f"train.max_steps (train.epochs={config.train.epochs} would be {steps * config.train.epochs})"
        epochs_reason = f"train.max_steps={max_steps} ends epoch {epochs}" + (
            f" after {last} of its {steps} steps" if last < steps else ""
        )
    budget = parse_duration(config.train.max_time) if str(config.train.max_time).strip() else None
    if budget and not config.checkpoint.enabled:
        plan = plan.with_warning(
            "train.max_time with checkpoint.enabled=false: the launch stops at its budget without a checkpoint, so "
            "running it again starts over"
        )
    return plan.with_record(
        SchedulePlan.of(
            lr_schedule_arguments=_lr_schedule_arguments(config, plan, steps, total, warmup[0]),
            test_steps=_test_steps(config, plan, num_test, global_batch),
            unfreeze_step=_unfreeze_step(config, steps),
            val_every_steps=_val_every_steps(config, steps, val_steps),
            unfreeze_lr_factor=_unfreeze_factor(config, steps),
            unfreeze_fresh_optimizer=_fresh_optimizer(config, steps),
            steps_per_epoch=(steps, reason),
            validation_steps=(val_steps, val_reason),
            total_steps=(total, total_reason),
            epochs=(epochs, epochs_reason),
            warmup_steps=warmup,
            max_time_seconds=(
                (budget, f"{show_duration(budget)} of training, from its first step; then save, stop, exit 0")
                if budget
                else None
            ),
            max_steps=(max_steps, "ends training at that global step") if max_steps and max_steps < total_all else None,
        )
    )


def _test_steps(config: Config, plan: Plan, num_test: int, global_batch: int) -> tuple[int, str] | None:
    """train.test_at_end: every test example once, after training, on the best model (else the final one)."""
    if not config.train.test_at_end:
        return None
    if num_test < 1:
        raise ConfigError.single(
            "train.test_at_end",
            True,
            f"a test split (dataset={config.dataset.name} has none)",
            "dataset.test_split=0.1 (array datasets), dataset.test=<glob> (tfrecord), dataset.test_path=<folder> "
            '(image_folder), a "test" entry (custom loader); or train.test_at_end=false',
        )
    monitor = plan.task.best_by
    if monitor and config.checkpoint.enabled:
        which = f"the best model by checkpoint.monitor={monitor}"
    else:
        which = "the final model (" + ("checkpoint.enabled=false" if monitor else "no checkpoint.monitor") + ")"
    return math.ceil(num_test / global_batch), f"{num_test} test examples, evaluated once after training on {which}"


def _lr_schedule_arguments(config: Config, plan: Plan, steps: int, total: int, warmup: int) -> tuple[dict, str] | None:
    """The schedule's keyword arguments: schedule_params, plus what the launcher fills unless given (the planned
    peak rate, the steps after warmup, one epoch's steps), each filled one named in the reason."""
    name, given = plan.optimizer.schedule, dict(config.optimizer.schedule_params)
    after = max(total - warmup, 1)
    fills = {
        "initial_learning_rate": (plan.learning_rate.peak, "the planned rate"),
        "decay_steps": (after, f"{total} steps - {warmup} warmup"),
    }
    if not is_import_path(name):
        kind = SCHEDULES.get(name)
        if kind is None or kind.keras_class is None:
            return None
        fills = {
            **({"initial_learning_rate": fills["initial_learning_rate"]} if kind.peak else {}),
            **({kind.decay_argument: fills["decay_steps"]} if kind.decay_argument else {}),
            **({kind.epoch_argument: (steps, "one epoch")} if kind.epoch_argument else {}),
        }
    filled = {key: pair for key, pair in fills.items() if key not in given}
    reason = "; ".join(
        part
        for part in (
            ", ".join(f"{key} = {why}" for key, (_, why) in filled.items()),
            f"given: {sorted(given)}" if given else "",
        )
        if part
    )
    return {**{key: value for key, (value, _) in filled.items()}, **given}, reason or "as given"


def _unfreeze_step(config: Config, steps: int) -> tuple[int, str] | None:
    """train.unfreeze_at_epoch as the global step from which model.freeze's layers train."""
    at = config.train.unfreeze_at_epoch
    if at <= 0 or not list(getattr(config.model, "freeze", []) or []):
        return None
    return at * steps, f"after {at} epoch(s) x {steps} steps model.freeze's layers train too (the step is retraced)"


def _unfreeze_factor(config: Config, steps: int) -> tuple[float, str] | None:
    """train.unfreeze_learning_rate as a factor on the planned schedule (so the batch rule's scaling carries over)."""
    rate, at = config.train.unfreeze_learning_rate, config.train.unfreeze_at_epoch
    if rate <= 0 or at <= 0:
        return None
    factor = rate / config.optimizer.learning_rate
    why = f"{rate:g} / optimizer.learning_rate {config.optimizer.learning_rate:g}"
    return factor, f"{why}: the schedule x {factor:.4g} from global step {at * steps}"


def _fresh_optimizer(config: Config, steps: int) -> tuple[bool, str] | None:
    """train.unfreeze_fresh_optimizer: the optimizer's state zeroed at the unfreeze."""
    if not config.train.unfreeze_fresh_optimizer or _unfreeze_step(config, steps) is None:
        return None
    at = config.train.unfreeze_at_epoch * steps
    return True, (
        f"at global step {at} the optimizer starts afresh (slots and step count zeroed, as a new optimizer); "
        f"the learning-rate schedule goes on from step {at}"
    )


def _val_every_steps(config: Config, steps: int, val_steps: int) -> tuple[int, str] | None:
    """train.val_every_steps: validations inside the epochs, besides the one at each epoch end."""
    every = config.train.val_every_steps
    if every <= 0:
        return None
    inside = "" if every < steps else f"; not below the {steps} steps of an epoch: only epoch ends validate"
    return every, (
        f"{val_steps} validation steps every {every} global steps and at each epoch end; the best model, early "
        f"stopping and the LR plateau rule count validations; val_* logged by global step{inside}"
    )
