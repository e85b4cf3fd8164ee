"""Swap the built model's stock layers for fused kernels that compute the same, and say which and why.

Today one swap: keras.layers.BatchNormalization -> `fused_batch_norm.FusedBatchNormalization`. The swap changes the
class of the layer objects the model already holds (`layer.__class__`), nothing else: the same variables, names,
connections and tracking, so it works the same for a built-in model, a user's functional, sequential or subclassed
model and models nested in them, and the model's checkpoint and `.keras` file are those of the stock model.
A subclass of BatchNormalization a user wrote keeps its own `call`.

The same concept one level up: `launcher.plan.rules.layer_swaps` decides whether swaps are on
(`model.layer_swaps`); this module applies it to the built model and writes the record of what it did.
"""

from __future__ import annotations

import keras

from launcher.plan.decisions import SwappedLayersPlan
from launcher.train.fine_tune import layer_paths
from launcher.train.fused_batch_norm import FUSED_DTYPES, FusedBatchNormalization

STOCK = keras.layers.BatchNormalization


def swap_layers(model, replicas: int) -> SwappedLayersPlan | None:
    """Swap every stock BatchNormalization of `model` the fused kernel can stand in for; the record of what was
    swapped and kept, each layer with its reason (None: the model has no BatchNormalization)."""
    swapped, kept = {}, {}
    for path, layer in batch_norm_layers(model).items():
        why_not = kept_because(layer)
        if why_not:
            kept[path] = why_not
            continue
        layer.__class__ = FusedBatchNormalization
        swapped[path] = swapped_because(layer, replicas)
    if not swapped and not kept:
        return None
    return SwappedLayersPlan.of(
        swapped=(
            swapped,
            "model.layer_swaps=auto: these BatchNormalization layers run FusedBatchNormV3 (same variables and "
            "moving averages as Keras's; checkpoints and .keras files are the stock model's)",
        ),
        kept=(kept, "these run Keras's own ops: the fused kernel would not compute the same") if kept else None,
    )


def batch_norm_layers(model) -> dict[str, object]:
    """Every BatchNormalization below `model` (nested models' and layers' included), by its path of names."""
    paths = {id(layer): path for path, layer in layer_paths(model).items()}
    return {
        paths.get(id(layer), layer.name): layer
        for layer in model._flatten_layers(include_self=False)
        if isinstance(layer, STOCK)
    }


def kept_because(layer) -> str | None:
    """Why this layer keeps Keras's ops whatever it is called on (None: it is swapped)."""
    if type(layer) is FusedBatchNormalization:
        return None
    if type(layer) is not STOCK:
        return f"{type(layer).__name__}, a subclass of BatchNormalization: its own call is kept"
    as_fused = FusedBatchNormalization.settings_unfused_because(layer)
    if as_fused:
        return as_fused
    dtype = keras.backend.standardize_dtype(layer.compute_dtype)
    if dtype not in FUSED_DTYPES:
        return f"{dtype} (the kernel takes {', '.join(FUSED_DTYPES)})"
    rank = layer.input_spec.ndim if layer.built and layer.input_spec is not None else None
    if rank is not None and rank != 4:
        return f"{rank}-D inputs (the fused kernel takes 4-D: batch, height, width, channels)"
    if rank == 4 and layer.axis not in (-1, 3):
        return f"axis={layer.axis}, channels first (the CPU kernel is channels-last only)"
    return None


def swapped_because(layer, replicas: int) -> str:
    """What the swapped layer runs, in a few words."""
    if not layer.built:
        return "not built yet: FusedBatchNormV3 on 4-D channels-last inputs, Keras's ops on others (each call)"
    if layer.synchronized and replicas > 1:
        return (
            f"FusedBatchNormV3 in inference; training keeps Keras's ops (synchronized=True: the batch statistics "
            f"are all-reduced across the {replicas} replicas)"
        )
    if layer.synchronized:
        return "FusedBatchNormV3: 4-D channels-last, synchronized=True over one replica (its statistics are global)"
    return "FusedBatchNormV3: 4-D channels-last, each replica's own statistics (as Keras's)"
