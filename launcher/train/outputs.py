"""What a model's outputs are: logits, or probabilities (the model ends in softmax or sigmoid, as keras.io's do).

Read from each output's last layer (through the float32 layer a mixed policy adds after it), or declared by
`task.outputs` / `task.heads.<output>.outputs`. The task then gives its loss and metrics the outputs as plain Keras
`fit` does, and serves them as they are (`launcher.train.tasks.Task`).
"""

from __future__ import annotations

import keras

from launcher.train.user_model import output_names

PROBABILITIES = ("softmax", "sigmoid")


def output_activations(model) -> dict[str, str]:
    """Output name -> the activation that makes it ("softmax", "sigmoid", or "" for anything else, logits
    included); {} for a subclassed model without symbolic outputs (its outputs are taken as logits unless declared)."""
    outputs = getattr(model, "outputs", None)
    if not outputs:
        return {}
    return {name: last_activation(t) for name, t in zip(output_names(model), outputs, strict=True)}


def last_activation(tensor) -> str:
    """The activation of the layer that makes `tensor`, looking through linear Activation layers (the float32
    layer a mixed policy adds, a cast)."""
    for _ in range(8):  # a chain of linear layers is short; never loop on a strange graph
        history = getattr(tensor, "_keras_history", None)
        if history is None:
            return ""
        layer, node_index = history[0], history[1]
        if isinstance(layer, keras.layers.Softmax):
            return "softmax"
        name = getattr(getattr(layer, "activation", None), "__name__", "")
        if name in PROBABILITIES:
            return name
        if not (isinstance(layer, keras.layers.Activation) and name == "linear"):
            return ""
        inputs = layer._inbound_nodes[node_index].input_tensors
        if len(inputs) != 1:
            return ""
        tensor = inputs[0]
    return ""


def takes_logits(declared: str, activation: str) -> bool:
    """Whether an output is logits: as declared (`logits`, `probabilities`), else (`auto`) unless its last layer is
    a softmax or sigmoid."""
    if declared == "logits":
        return True
    if declared == "probabilities":
        return False
    return activation not in PROBABILITIES


def described(declared: str, activation: str) -> str:
    """How the Plan says what an output is and why."""
    if declared in ("logits", "probabilities"):
        return f"{declared} (declared)"
    if activation in PROBABILITIES:
        return f"probabilities (its last layer is a {activation})"
    return "logits (no softmax or sigmoid at its end)"
