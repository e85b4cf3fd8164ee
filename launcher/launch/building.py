"""The build step: model.adapt's layers, then model, optimizer and metrics inside the strategy scope, then what only
the built model shows (its output dtype), model.init_from's weights and model.freeze's layers, each a Plan record.

A source that does not fit, a freeze that matches nothing, or a monitored metric the built task does not log is
refused here, before anything runs.
"""

from __future__ import annotations

from pathlib import Path

from launcher.config.errors import ConfigError, FailsUnderMixedPolicy, raise_if_any
from launcher.config.tasks import epoch_metrics, known_epoch_metrics, monitor_problems
from launcher.export.trained import check_exports
from launcher.launch.preflight import Prepared, save_plan, show_plan
from launcher.launch.review import decided_again
from launcher.plan.decisions import InputsPlan, Plan, render_changes, render_records
from launcher.plan.rules.batch_norm import moving_average_warning
from launcher.train.batch_norm import batch_norm_momenta
from launcher.train.fine_tune import Freezer, freeze_record, frozen_layers, load_matching
from launcher.train.preprocessing import pixel_scaling
from launcher.train.runtime import layer_name_counters, reseed, restore_layer_name_counters


class UncompilableModel(Exception):
    """xla=auto chose XLA for a model that turns out, once built, to hold layers XLA cannot compile."""

    def __init__(self, layers: list[str]):
        super().__init__(", ".join(layers))
        self.layers = tuple(layers)


def build_model(config, plan: Plan, prepared: Prepared, run_dir: Path, checkpoint_dir: Path) -> tuple:
    """(the Built model, the Plan with its records, model.freeze's Freezer or None). model.adapt's layers are
    adapted first, on the training split, or read back from `checkpoint_dir` when the run resumes. A model xla=auto
    chose XLA for that holds layers XLA cannot compile, or a builder that fails under the mixed policy
    precision=auto chose and runs under float32, is built again under the Plan decided again with that fact (auto
    never keeps what the model cannot build or run)."""
    facts: dict = {}
    names = layer_name_counters()
    for _ in range(3):  # at most one fact of each kind is learnt
        try:
            return _build_once(config, plan, prepared, run_dir, checkpoint_dir)
        except UncompilableModel as found:
            if "uncompilable_layers" in facts:
                raise RuntimeError(f"the Plan decided again still compiles {found}") from None
            facts["uncompilable_layers"] = found.layers
        except FailsUnderMixedPolicy as found:
            if "float32_builder" in facts or not plan.precision.reason("name").startswith("precision=auto"):
                raise  # asked for by name: refused, with precision=fp32 as the fix
            facts["float32_builder"] = found.policy
        before, plan = plan, decided_again(config, prepared, plan, **facts)
        show_plan(plan, render_changes(before, plan, "Plan decided again, from the built model:"))
        save_plan(plan, run_dir)
        reseed(config.seed)  # the model built again starts from the seed and with the names one built once has
        restore_layer_name_counters(names)
    raise RuntimeError("the model was built three times and the Plan still changed")


def _build_once(config, plan: Plan, prepared: Prepared, run_dir: Path, checkpoint_dir: Path) -> tuple:
    from launcher.train.adapt import adapt_once
    from launcher.train.build import build

    resumes = config.checkpoint.enabled and str(config.checkpoint.resume) != "never"
    adapted = adapt_once(config.model, prepared.source, prepared.strategy, checkpoint_dir if resumes else None)
    built = build(config, plan, prepared.source, prepared.strategy, adapted)
    inputs = _inputs_record(adapted, pixel_scaling(built.model, prepared.source))
    check_compilable(config, plan, built.model)
    records, freezer = [], None
    shown = [r for r in (inputs, built.output, built.swaps) if r is not None]
    for record in shown:  # what only the built model shows (its output dtype, its swapped layers): printed and saved
        plan = plan.with_record(record)
    if shown:
        show_plan(plan, render_records(shown, "the build"))
        save_plan(plan, run_dir)
    if prepared.init_source is not None:
        with prepared.strategy.scope():
            source_model = _init_model(built, prepared.init_source)
            records.append(
                load_matching(built.model, source_model, prepared.init_source.shown, config.model.init_skip_mismatch)
            )
    if patterns := list(config.model.freeze or []):
        layers = frozen_layers(built.model, patterns)
        records.append(freeze_record(built.model, layers, config.train.unfreeze_batch_norm))
        fresh_at = plan.schedule.unfreeze_step if plan.schedule.unfreeze_fresh_optimizer else None
        freezer = Freezer(
            layers, config.train.unfreeze_at_epoch, config.train.unfreeze_batch_norm, fresh_at, built.optimizer
        )
    for record in records:
        plan = plan.with_record(record)
    if records:
        show_plan(plan, render_records(records, "model.init_from and model.freeze"))
        save_plan(plan, run_dir)
    plan = _moving_averages(plan, built.model, run_dir)
    _check_monitor(config, plan, built)
    check_exports(config, plan, built, prepared.source)  # the formats asked for, tried before the first step
    return built, plan, freezer


def _inputs_record(adapted, pixels: tuple[str, str] | None) -> InputsPlan | None:
    """What prepares the model's inputs: model.adapt's layers, and which side scales an image folder's pixels."""
    if adapted is None and pixels is None:
        return None
    return InputsPlan.of(adapted=(adapted.described, adapted.reason) if adapted else None, pixels=pixels)


def check_compilable(config, plan: Plan, model) -> None:
    """A step XLA compiles cannot hold layers Keras marks `supports_jit=False` (lookup tables on ids: IntegerLookup,
    Hashing): xla=auto's choice is decided again (UncompilableModel), xla=true refused now, with the fix, rather
    than failing at the first step. String inputs never get here with XLA on: the resolver keeps it off for them
    (`launcher.plan.rules.step`)."""
    if not plan.step.xla:
        return
    layers = [layer.name for layer in model._flatten_layers(include_self=False) if not layer.supports_jit]
    if layers and plan.step.reason("xla").startswith("xla=auto"):
        raise UncompilableModel(layers)
    if layers:
        raise ConfigError.single(
            "xla",
            str(config.xla).lower(),
            "a model XLA can compile (xla=true; the model has layers Keras marks supports_jit=False, "
            f"{', '.join(repr(name) for name in layers[:5])}: lookup tables and string ops do not compile)",
            'xla=false (the graph step runs them), or move these layers into the loader\'s "preprocess" (it runs in '
            "the data pipeline, outside the compiled step)",
        )


def _moving_averages(plan: Plan, model, run_dir: Path) -> Plan:
    """A run too short for its BatchNormalization layers' moving averages: warned, with the fix, once the built
    model shows their momentum (`launcher.plan.rules.batch_norm`)."""
    schedule = plan.schedule
    warning = moving_average_warning(batch_norm_momenta(model), schedule.total_steps, schedule.steps_per_epoch)
    if warning is None:
        return plan
    plan = plan.with_warning(warning)
    show_plan(plan, f"Plan warning, from the built model:\n  ! {warning}")
    save_plan(plan, run_dir)
    return plan


def _init_model(built, source):
    """The source's network: a .keras file loaded as saved, or a checkpoint restored into a twin of this
    config's model (a checkpoint has no layer names: it must be of this architecture)."""
    import keras
    import tensorflow as tf

    if source.kind == "keras":
        return keras.saving.load_model(source.path, compile=False)
    twin = built.rebuild().model
    try:
        tf.train.Checkpoint(model=twin).restore(str(source.path)).expect_partial()
    except (ValueError, tf.errors.OpError) as err:
        raise ConfigError.single(
            "model.init_from",
            str(source.path),
            f"a checkpoint of this model's architecture ({str(err).splitlines()[0][:200]})",
            "init_from the run itself (its model.keras is matched layer by layer, a new head skipped)",
        ) from None
    return twin


def _check_monitor(config, plan: Plan, built) -> None:
    """A user metric's name is known once the task is built: checkpoint.monitor (and the like) checked against it."""
    task = plan.task.name
    if known_epoch_metrics(task, plan.task.metrics) is None:
        names = [m.name for m in built.task.train_metrics]
        raise_if_any(monitor_problems(config, task, epoch_metrics(names)))
