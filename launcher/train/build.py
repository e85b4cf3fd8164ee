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
from launcher.plan.decisions import OutputPlan, SwappedLayersPlan
from launcher.train import loss_scale
from launcher.train.adapt import Adapted, adapt_once
from launcher.train.callbacks import make_callbacks
from launcher.train.layer_swaps import swap_layers
from launcher.train.optimizers import make_optimizer
from launcher.train.outputs import output_activations
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
    adapted: Adapted | None = None  # model.adapt's layers, adapted once on the training split (a Plan record)
    swaps: SwappedLayersPlan | None = None  # the layers swapped for fused kernels (a Plan record), if any


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
    one that is not float32. The model answers a dict keyed by head (its output names), so a saved and reloaded
    model names its heads as the user did, not after the float32 layers."""
    names = output_names(model)
    dtypes = [str(t.dtype) for t in model.outputs]
    if isinstance(model.output, dict) and all(dtype == "float32" for dtype in dtypes):
        return model, None
    taken = {layer.name for layer in model._flatten_layers(include_self=False)}
    flat = [_as_float32(t, _free_name(f"{name}_float32", taken)) for t, name in zip(model.outputs, names, strict=True)]
    wrapped = keras.Model(model.input, dict(zip(names, flat, strict=True)), name=model.name)
    if all(dtype == "float32" for dtype in dtypes):
        return wrapped, None  # the same layers, keyed by head
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


def model_heads(model, source) -> dict[str, int]:
    """The model's outputs by name -> units (a subclassed model's from one call on the data's first inputs)."""
    outputs = getattr(model, "outputs", None)
    if outputs:
        return {name: int(t.shape[-1] or 0) for name, t in zip(output_names(model), outputs, strict=True)}
    try:
        called = model(source.first_inputs(1, "train"), training=False)
    except Exception:
        return {}  # the first step says what is wrong with it
    if isinstance(called, dict):
        return {str(name): int(t.shape[-1]) for name, t in called.items()}
    if isinstance(called, list | tuple):
        return {f"output_{i}": int(t.shape[-1]) for i, t in enumerate(called)}
    return {"output_0": int(called.shape[-1])}


def input_names(model) -> list[str]:
    """The names the model's inputs take: a dict input's keys, else its Input layers' names."""
    if isinstance(getattr(model, "input", None), dict):
        return [str(name) for name in model.input]
    return [t._keras_history[0].name for t in getattr(model, "inputs", None) or []]


def check_heads(model_key: str, model_value, task_config, heads: dict[str, int], source) -> None:
    """The model's outputs, task.heads and the data's targets name the same heads; every mismatch names both
    sets."""
    names = list(heads)
    configured = list(task_config.heads or {})
    targets = list(getattr(source, "head_names", ()) or ())
    if not configured and len(names) > 1:
        raise ConfigError.single(
            model_key,
            model_value,
            f"a model with one output while task.heads is not set (one loss and its metrics); "
            f"yours has {len(names)} outputs {names}",
            f"give each output a task: task.heads.<name> (e.g. +task.heads={{{names[0]}: {{name: classification}}, "
            f"{names[1]}: {{name: regression}}}}), or return keras.Model(inputs, <one of {names}>)",
        )
    if not configured and targets:
        raise ConfigError.single(
            "task.heads",
            {},
            f"a task for each head the data's targets name {targets} (y is a dict)",
            "add task.heads.<name> for each, e.g. in your conf/task/<mine>.yaml: heads: {"
            + ", ".join(f"{t}: {{name: classification}}" for t in targets)
            + "}",
        )
    if configured and set(configured) != set(names):
        missing, extra = sorted(set(names) - set(configured)), sorted(set(configured) - set(names))
        # The data's y keys agree with task.heads: the model's output names are the odd ones out.
        with_targets = set(targets) == set(configured)
        raise ConfigError.single(
            "task.heads",
            configured,
            f"a task for each of the model's outputs {names} and none other (outputs with no task config: "
            f"{missing}; head configs with no such output: {extra}"
            + ("; the loader's y keys are those of task.heads)" if with_targets else ")"),
            "name each task.heads.<name> after an output of the model (keras.Model(inputs, {name: tensor}) or the "
            "output layers' names)"
            + (f", and the loader's y keys too; or name the model's outputs {configured}" if with_targets else ""),
        )
    if configured and set(targets) != set(names):
        raise ConfigError.single(
            "dataset",
            targets or "one target array",
            f"targets keyed by the model's output names {names} (y keys {targets} are not those)",
            f"return y as a dict {{{', '.join(f'{n!r}: labels' for n in names)}}} from the loader",
        )


def check_inputs(model_key: str, model_value, model, source) -> None:
    """A model of several named inputs takes the data's features by name: the two sets must be the same."""
    features = list(getattr(source, "feature_names", ()) or ())
    inputs = input_names(model)
    if features and set(features) != set(inputs):
        raise ConfigError.single(
            model_key,
            model_value,
            f"a model whose inputs are named as the data's features {features}; its inputs are {inputs}",
            f"name the model's inputs {features} (keras.Input(name=...) or a dict of inputs), or the loader's "
            f"features {inputs}",
        )


def _task_record(output: OutputPlan | None, task, task_config, activations: dict) -> OutputPlan | None:
    """The class weights the loss uses (balanced ones are only known now) and which outputs are probabilities,
    added to the output record; a run of logits outputs without class weights adds nothing."""
    heads = getattr(task, "heads", None) or {"task": task}
    weights = {
        h: [round(float(w), 6) for w in t.class_weights] for h, t in heads.items() if t.class_weights is not None
    }
    given = _outputs_given(heads, task_config, activations)
    if not weights and given is None:
        return output
    reason = "per class id, from task.class_weight / task.heads.<name>.class_weight (balanced: n / (classes * count))"
    as_built = ("float32", "the model's outputs are float32 as built")
    return OutputPlan.of(
        dtype=as_built if output is None else (output.dtype, output.reason("dtype")),
        heads=None if output is None or output.heads is None else (output.heads, output.reason("heads")),
        class_weights=(weights, reason) if weights else None,
        given=given,
    )


def _outputs_given(heads: dict, task_config, activations: dict) -> tuple | None:
    """(what each output is, why) when some output is probabilities or was declared; None otherwise."""
    from launcher.train.outputs import described

    configs = dict(task_config.heads) if task_config.heads else {"task": task_config}
    declared = {h: c.outputs.value for h, c in configs.items()}  # a TaskOutputs, of the task or each head
    if all(t.from_logits for t in heads.values()) and set(declared.values()) == {"auto"}:
        return None
    said = {h: described(declared[h], activations.get("" if h == "task" else h, "")) for h in heads}
    value = said["task"] if list(said) == ["task"] else said
    return value, (
        "the loss and metrics get the outputs as plain Keras fit gives them; probabilities are served as they are, "
        "logits after a softmax (sigmoid for one unit or per label)"
    )


def build(config, plan, source, strategy, adapted: Adapted | None = None) -> Built:
    """Everything with variables, in the scope; `adapted`: model.adapt's layers, adapted once before (a twin made
    by `rebuild` shares them); adapted here on the training split when not given (tune, the doctor's trials)."""
    from launcher.train.tasks import make_task

    adapted = adapted or adapt_once(config.model, source, strategy, None)
    given = {"adapted": adapted.layers} if adapted is not None else {}
    with strategy.scope():
        model = MODELS.get(config.model.name).build(config.model, source, **given)
        activations = output_activations(model)  # read before a float32 layer is added after an output
        model, output = float32_output(model, plan.precision.mixed)
        custom = not model_kind(config.model).builtin
        key, value = ("model.builder", config.model.builder) if custom else ("model", config.model.name)
        check_in_scope(model, strategy, key, value)
        heads = model_heads(model, source)  # (calls a subclassed model once: its layers are built after)
        swaps = swap_layers(model, plan.strategy.replicas) if plan.layer_swaps and plan.layer_swaps.on else None
        check_heads(key, value, config.task, heads, source)
        if isinstance(getattr(model, "input", None), dict) or len(getattr(model, "inputs", None) or []) > 1:
            check_inputs(key, value, model, source)
        one = {"": next(iter(heads.values()), 0)}, {"": next(iter(activations.values()), "")}
        widths, activations = (heads, activations) if config.task.heads else one
        task = make_task(config.task, source, widths, activations=activations)
        output = _task_record(output, task, config.task, activations)
        callbacks = make_callbacks(config.train)
        if plan.precision.float32_layers:
            keep_in_float32(model, list(config.precision.float32_layers))
        fused = plan.step.update == "fused"
        inner = make_optimizer(config.optimizer, learning_rate(plan), fused)
        optimizer = loss_scale.wrap(inner, plan, config.loss_scale)
        optimizer.build(model.trainable_variables)
    return Built(
        strategy=strategy,
        model=model,
        optimizer=optimizer,
        rebuild=lambda: build(config, plan, source, strategy, adapted),
        task=task,
        callbacks=callbacks,
        output=output,
        swaps=swaps,
        adapted=adapted,
    )
