"""Look inside the model: where the first non-finite value appears, and which layers float16 cannot hold.

`first_nonfinite` replays one training step eagerly with every layer's output and every gradient
in hand: the first layer whose output is NaN/inf (forward), else the layer whose backward pass made
its input gradient or weight gradients non-finite (walking from the loss back). `scan` runs the
float32 model on a batch and flags layers whose activations exceed float16's range, plus the ops
that are risky in float16 whatever the data (exp/log/softmax inside the model, opaque Lambda layers,
an output or a loss that is not float32).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

FLOAT16_MAX = 65504.0
HEADROOM = 8.0  # activations within 8x of the float16 maximum overflow after a few updates
RISKY_ACTIVATIONS = {"softmax", "exponential", "log_softmax", "softplus", "elu", "selu", "gelu"}


@dataclass
class Culprit:
    """Where the first non-finite value appeared in the replayed step."""

    step: int
    direction: str  # forward, backward, input (the batch itself) or unknown
    layer: str | None
    detail: str


@dataclass
class Risk:
    layer: str
    kind: str  # overflow, near_overflow, risky_op, opaque, output
    detail: str
    fix: str
    severe: bool
    layers: list[str] = field(default_factory=list)  # what the fix keeps in float32


def _layers(model):
    import keras

    return [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]


def _probe(model):
    """A model returning every layer's output and the model's own outputs (shares the layers and weights; takes the
    model's input structure, a dict of named features included); None when not functional."""
    import keras

    try:
        layers = _layers(model)
        return layers, keras.Model(model.input, [[layer.output for layer in layers], model.output])
    except (AttributeError, ValueError, TypeError):
        return None, None


def _nonfinite_inputs(x) -> str | None:
    """Which features of the batch hold NaN or inf, and in how many examples; None when all are finite."""
    import keras

    found = []
    for path, value in keras.tree.flatten_with_path(x):
        values = np.asarray(value)
        if values.dtype.kind != "f" or np.isfinite(values).all():
            continue
        bad = int((~np.isfinite(values.reshape(len(values), -1))).any(axis=1).sum())
        name = "/".join(str(part) for part in path)
        found.append(f"{bad} example(s) of the batch" + (f" (feature {name})" if name else ""))
    return "; ".join(found) + " contain NaN or inf" if found else None


def _readers(layers) -> list[list[int]]:
    """For each layer, the positions of the layers whose outputs it reads (none for one reading the inputs)."""
    position = {id(layer): i for i, layer in enumerate(layers)}
    found = []
    for i, layer in enumerate(layers):
        nodes = getattr(layer, "_inbound_nodes", None) or []
        tensors = nodes[0].input_tensors if nodes else []
        read = [position.get(id(t._keras_history[0]), -1) for t in tensors if hasattr(t, "_keras_history")]
        found.append([j for j in read if j >= 0] if tensors else ([i - 1] if i > 0 else []))
    return found


def first_nonfinite(model, loss_fn, x, y, scale: float, step: int, sample_weight=None) -> Culprit:
    """Replay one training step layer by layer; name the first non-finite value. `x` and `y` in the model's and
    the task's structures (a dict of named features, a dict of targets by head), `loss_fn` the task's per-example
    loss (y, outputs, sample_weight)."""
    import tensorflow as tf

    bad_inputs = _nonfinite_inputs(x)
    if bad_inputs:
        return Culprit(step, "input", None, bad_inputs)
    layers, probe = _probe(model)
    if probe is None:
        return Culprit(step, "unknown", None, "the model is not a functional Keras model: layers cannot be probed")
    with tf.GradientTape(persistent=True) as tape:
        outputs, answered = probe(x, training=True)
        loss = tf.reduce_mean(tf.cast(loss_fn(y, answered, sample_weight), tf.float32))
        scaled = loss * scale
    for layer, out in zip(layers, outputs, strict=True):
        if not _finite(out):
            return Culprit(
                step,
                "forward",
                layer.name,
                f"its {out.dtype.name} output is non-finite ({_describe(out)}); its input was finite",
            )
    if not _finite(loss):
        return Culprit(step, "forward", "loss", f"the loss is {float(loss)} on finite outputs")
    output_grads = tape.gradient(scaled, outputs)
    readers = _readers(layers)
    for i in range(len(layers) - 1, -1, -1):
        layer = layers[i]
        weight_grads = [g for g in tape.gradient(scaled, layer.trainable_weights) if g is not None]
        input_grads = [output_grads[j] for j in readers[i] if output_grads[j] is not None]
        bad_weights = [g for g in weight_grads if not _finite(g)]
        if bad_weights or any(not _finite(g) for g in input_grads):
            what = "weight gradients" if bad_weights else "input gradient"
            return Culprit(
                step,
                "backward",
                layer.name,
                f"its backward pass made its {what} non-finite (loss scale {scale:g}) from a finite output gradient",
            )
    del tape
    return Culprit(step, "unknown", None, "the replayed step is finite everywhere (the failure did not reproduce)")


def _finite(t) -> bool:
    import tensorflow as tf

    if isinstance(t, tf.IndexedSlices):
        t = t.values
    return bool(tf.reduce_all(tf.math.is_finite(tf.cast(t, tf.float32))))


def _describe(t) -> str:
    values = np.asarray(t, dtype=np.float32)
    return f"{int(np.isnan(values).sum())} NaN, {int(np.isinf(values).sum())} inf of {values.size}"


def activation_ranges(model, x) -> dict[str, float]:
    """Largest |activation| per layer on the batch `x` (run the float32 model: the true magnitudes)."""

    layers, probe = _probe(model)
    if probe is None:
        return {}
    outputs, _ = probe(x, training=False)
    ranges = {}
    for layer, out in zip(layers, outputs, strict=True):
        values = np.abs(np.asarray(out, dtype=np.float32))
        ranges[layer.name] = float(values.max()) if values.size else 0.0  # NaN/inf propagate: an overflow
    return ranges


def consumers(model, name: str) -> list[str]:
    """Layers reading `name`'s output: a float16 layer would cast an overflowing float32 input back."""
    layer = model.get_layer(name)
    layers = {other.name for other in _layers(model)}
    found = []
    for node in getattr(layer, "_outbound_nodes", []):
        operation = getattr(node, "operation", None)
        if operation is not None and operation.name != name and operation.name in layers:
            found.append(operation.name)
    return found


def scan(model, ranges: dict[str, float]) -> list[Risk]:
    """Float16 risks of a model, severe first; `ranges` from `activation_ranges` on the float32 model."""
    import keras

    layers = _layers(model)
    heads = {t._keras_history[0].name for t in getattr(model, "outputs", None) or []}
    risks = []
    for i, layer in enumerate(layers):
        near_output = i >= len(layers) - 2 or layer.name in heads
        peak = ranges.get(layer.name)
        if peak is not None and peak >= FLOAT16_MAX:
            keep = [layer.name, *consumers(model, layer.name)]
            risks.append(
                Risk(
                    layer.name,
                    "overflow",
                    f"activations reach {peak:.3g} (float16 max {FLOAT16_MAX:g})",
                    f"precision.float32_layers=[{','.join(keep)}] (it and the layers reading it)",
                    True,
                    keep,
                )
            )
        elif peak is not None and peak >= FLOAT16_MAX / HEADROOM:
            risks.append(
                Risk(
                    layer.name,
                    "near_overflow",
                    f"activations reach {peak:.3g}: within {HEADROOM:g}x of float16's max",
                    f"precision.float32_layers=[{layer.name}] if training grows them",
                    False,
                )
            )
        activation = getattr(getattr(layer, "activation", None), "__name__", "")
        if isinstance(layer, keras.layers.Softmax):
            activation = "softmax"
        if activation in RISKY_ACTIVATIONS and not near_output:
            risks.append(
                Risk(
                    layer.name,
                    "risky_op",
                    f"{activation} inside the model (exp overflows float16 above ~11)",
                    f"precision.float32_layers=[{layer.name}]",
                    False,
                )
            )
        if isinstance(layer, keras.layers.Lambda):
            risks.append(
                Risk(
                    layer.name,
                    "opaque",
                    "a Lambda layer: its ops (division, log, sums) cannot be checked",
                    f"precision.float32_layers=[{layer.name}] if the doctor localises it",
                    False,
                )
            )
    return sorted(risks, key=lambda r: not r.severe)


def output_risk(build_model, policy: str) -> Risk | None:
    """Build the model as its builder returns it under `policy`: a float16 output would put the loss in
    float16 (overflowing logits, log of underflowed probabilities). The launcher wraps such an output in a
    float32 layer before training; this says so, naming the layer."""
    import keras

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = build_model()
    finally:
        keras.mixed_precision.set_global_policy(previous)
    found = [(t._keras_history[0].name, str(t.dtype)) for t in model.outputs if str(t.dtype) != "float32"]
    if not found:
        return None
    if len(model.outputs) == 1:
        last, dtype = _layers(model)[-1].name, found[0][1]
        return Risk(
            last,
            "output",
            f"the builder's output ({last}) is {dtype}: the loss would compute in {dtype}",
            "none needed: the launcher adds a float32 `logits_float32` layer, so the loss computes in float32",
            False,
            [last],
        )
    names = [name for name, _ in found]
    return Risk(
        names[0],
        "output",
        f"the builder's outputs {names} are {found[0][1]}: their losses would compute in {found[0][1]}",
        "none needed: the launcher adds a float32 `<output>_float32` layer after each, so every head's loss "
        "computes in float32",
        False,
        names,
    )
