"""Build everything that creates variables, in one place, inside strategy.scope().

The strategy and the dtype policy come from `runtime.configure`, which runs first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

from launcher.config.errors import ConfigError
from launcher.config.models import model_kind
from launcher.plan.decisions import OutputPlan
from launcher.train import loss_scale
from launcher.train.callbacks import make_callbacks
from launcher.train.optimizers import make_optimizer
from launcher.train.registry import MODELS
from launcher.train.schedules import learning_rate
from launcher.train.user_model import output_names

if TYPE_CHECKING:
    from launcher.train.tasks import Task


@dataclass
class Built:
    """Everything that holds variables, created inside the strategy's scope: what the engine trains."""

    strategy: tf.distribute.Strategy
    model: keras.Model
    optimizer: keras.optimizers.Optimizer  # wrapped in the Plan's loss-scale optimizer, if any
    # Builds an independent twin (fresh variables): used to verify checkpoints restore.
    rebuild: Callable[[], Built] | None = None
    task: Task | None = None  # the loss and the metric objects
    callbacks: list = field(default_factory=list)  # Keras callbacks: the standard ones configured, then the user's
    output: OutputPlan | None = None  # what the build did to the model's output (a Plan record), if anything


def float32_output(model, mixed: bool) -> tuple[Any, OutputPlan | None]:
    """Guarantee float32 logits whatever the builder did (mixed policies need the range), for every output the
    model has, and the record that says what was done (None: the outputs already were float32).

    A subclassed model without symbolic outputs is left as is: the task casts its outputs to float32
    before the loss and the metrics."""
    outputs = getattr(model, "outputs", None)
    if not outputs:
        cast = OutputPlan.of(
            dtype=(
                "float32 (cast)",
                "a subclassed model: its outputs are cast to float32 before the loss and the metrics",
            )
        )
        return model, cast if mixed else None
    if len(outputs) > 1:
        return float32_heads(model)
    if outputs[0].dtype == "float32":
        return model, None
    out = keras.layers.Activation("linear", dtype="float32", name="logits_float32")(outputs[0])
    wrapped = OutputPlan.of(
        dtype=(
            "float32 (wrapped)",
            f"the model's output is {outputs[0].dtype}: a float32 layer "
            "was added after it, so the loss and softmax have float32 range",
        )
    )
    return keras.Model(model.inputs, out, name=model.name), wrapped


def float32_heads(model) -> tuple[Any, OutputPlan | None]:
    """Every output of a model with several gets float32 range, none dropped: a float32 linear layer after each
    one that is not float32, in the model's structure (a list or a dict) and with its output names."""
    names = output_names(model)
    dtypes = [str(t.dtype) for t in model.outputs]
    if all(dtype == "float32" for dtype in dtypes):
        return model, None
    taken = {layer.name for layer in model._flatten_layers(include_self=False)}
    flat = [_as_float32(t, _free_name(f"{name}_float32", taken)) for t, name in zip(model.outputs, names, strict=True)]
    wrapped = keras.Model(model.input, keras.tree.pack_sequence_as(model.output, flat), name=model.name)
    wrapped.output_names = list(model.output_names)  # the user's, not the float32 layers'
    return wrapped, _heads_record(names, dtypes)


def _as_float32(tensor, name: str):
    if tensor.dtype == "float32":
        return tensor
    return keras.layers.Activation("linear", dtype="float32", name=name)(tensor)


def _free_name(wanted: str, taken: set[str]) -> str:
    """`wanted`, or with a number after it when the model has a layer of that name (names must be unique)."""
    name = wanted.replace("/", "_")
    number = 1
    while name in taken:
        name, number = f"{wanted.replace('/', '_')}_{number}", number + 1
    taken.add(name)
    return name


def _heads_record(names: list[str], dtypes: list[str]) -> OutputPlan:
    heads = {
        name: "float32 (kept)" if dtype == "float32" else f"{dtype} -> float32 (wrapped)"
        for name, dtype in zip(names, dtypes, strict=True)
    }
    wrapped = [name for name, dtype in zip(names, dtypes, strict=True) if dtype != "float32"]
    return OutputPlan.of(
        dtype=(
            "float32 (wrapped)",
            f"the model's outputs {wrapped} are not float32: a float32 layer was added after each, "
            "so every output's loss and softmax have float32 range",
        ),
        heads=(heads, "each output's dtype as built and what was done to it; every output is kept"),
    )


def check_in_scope(model, strategy, key: str, value) -> None:
    """Every variable of the model must belong to the strategy (created inside its scope), or the replicas would
    each train a copy nobody synchronises: a model built at import time or cached by the builder."""
    outside = [v.path for v in model.variables if not strategy.extended.variable_created_in_scope(v.value)]
    if outside:
        raise ConfigError.single(
            key,
            value,
            f"a model whose variables are created inside the strategy scope "
            f"({len(outside)} of {len(model.variables)} were created outside it, e.g. "
            f"{outside[:2]}: built at import time, cached, or loaded before the builder ran?)",
            "create the model (and its layers) inside the builder function, on every call",
        )


def keep_in_float32(model, names) -> None:
    """Run the named layers in float32 under a mixed policy (their variables already are float32).

    Setting the policy before the first call is enough: each layer casts its inputs to its compute
    dtype, so the next float16 layer casts back. An unknown name is a ConfigError listing the names.
    """
    if not names:
        return
    layers = {layer.name: layer for layer in model._flatten_layers(include_self=False)}
    unknown = [name for name in names if name not in layers]
    if unknown:
        shown = sorted(layers)
        raise ConfigError.single(
            "precision.float32_layers",
            unknown,
            f"names of layers in the built model: {shown}",
            f"precision.float32_layers=[{shown[0]}] (python -m launcher mode=doctor finds the ones that overflow)",
        )
    for name in names:
        layers[name].dtype_policy = "float32"


def build(cfg, plan, source, strategy) -> Built:
    from launcher.train.tasks import make_task

    with strategy.scope():
        model, output = float32_output(MODELS.get(cfg.model.name).build(cfg.model, source), plan.precision.mixed)
        custom = not model_kind(cfg.model).builtin
        check_in_scope(
            model, strategy, "model.builder" if custom else "model", cfg.model.builder if custom else cfg.model.name
        )
        task = make_task(cfg.task)
        callbacks = make_callbacks(cfg.train)
        if plan.precision.float32_layers:
            keep_in_float32(model, list(cfg.precision.float32_layers))
        fused = plan.step.update == "fused"
        inner = make_optimizer(cfg.optimizer, learning_rate(plan), fused)
        optimizer = loss_scale.wrap(inner, plan, cfg.loss_scale)
        optimizer.build(model.trainable_variables)
    return Built(
        strategy=strategy,
        model=model,
        optimizer=optimizer,
        rebuild=lambda: build(cfg, plan, source, strategy),
        task=task,
        callbacks=callbacks,
        output=output,
    )
