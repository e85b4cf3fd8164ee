"""Swap the built model's stock layers for fused kernels that compute the same, and say which and why.

Two swaps, each a stock layer and the fused class that stands in for it:
- keras.layers.BatchNormalization -> `fused_batch_norm.FusedBatchNormalization` (one FusedBatchNormV3);
- keras.layers.Dense with a GELU or SiLU activation -> `fused_activation.FusedActivationDense` (the bias add and the
  activation one compiled float32 cluster, the matmul on oneDNN).

A swap changes the class of the layer objects the model already holds (`layer.__class__`), nothing else: the same
variables, names, connections and tracking, so it works the same for a built-in model, a user's functional,
sequential or subclassed model and models nested in them, and the model's checkpoint and `.keras` file are those of
the stock model. A subclass a user wrote keeps its own `call`.

The same concept one level up: `launcher.plan.rules.layer_swaps` decides whether swaps are on
(`model.layer_swaps`); this module applies it to the built model and writes the record of what it did.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import keras

from launcher.plan.decisions import SwappedLayersPlan
from launcher.train.fine_tune import layer_paths
from launcher.train.fused_activation import FUSED_ACTIVATIONS, FusedActivationDense
from launcher.train.fused_batch_norm import FUSED_DTYPES, FusedBatchNormalization


@dataclass(frozen=True)
class Swap:
    """A stock layer class, the fused class standing in for it, which of its layers are candidates, why one keeps
    the stock ops and what a swapped one runs."""

    stock: type
    fused: type
    candidate: Callable[[object], bool]
    kept_because: Callable[[object], str | None]
    swapped_because: Callable[[object, int], str]

    def kept(self, layer) -> str | None:
        if type(layer) is self.fused:
            return None
        if type(layer) is not self.stock:
            return f"{type(layer).__name__}, a subclass of {self.stock.__name__}: its own call is kept"
        return self.kept_because(layer)


def _batch_norm_kept(layer) -> str | None:
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


def _batch_norm_swapped(layer, replicas: int) -> str:
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


def _dense_swapped(layer, replicas: int) -> str:
    bias = "bias add and " if layer.use_bias else ""
    return (
        f"{bias}{FUSED_ACTIVATIONS[layer.activation]} as one compiled float32 cluster, rounded once; "
        "the matmul on oneDNN"
    )


SWAPS = (
    Swap(
        keras.layers.BatchNormalization,
        FusedBatchNormalization,
        candidate=lambda layer: True,
        kept_because=_batch_norm_kept,
        swapped_because=_batch_norm_swapped,
    ),
    Swap(
        keras.layers.Dense,
        FusedActivationDense,
        candidate=lambda layer: FUSED_ACTIVATIONS.get(layer.activation) is not None,
        kept_because=lambda layer: FusedActivationDense.unfused_because(layer),
        swapped_because=_dense_swapped,
    ),
)


def swap_layers(model, replicas: int) -> SwappedLayersPlan | None:
    """Swap every stock layer of `model` a fused kernel can stand in for; the record of what was swapped and kept,
    each layer with its reason (None: the model has no layer a swap applies to)."""
    swapped, kept = {}, {}
    for path, (layer, swap) in swappable_layers(model).items():
        why_not = swap.kept(layer)
        if why_not:
            kept[path] = why_not
            continue
        layer.__class__ = swap.fused
        swapped[path] = swap.swapped_because(layer, replicas)
    if not swapped and not kept:
        return None
    return SwappedLayersPlan.of(
        swapped=(
            swapped,
            "model.layer_swaps=auto: these layers run fused kernels (the same variables as Keras's; checkpoints "
            "and .keras files are the stock model's)",
        ),
        kept=(kept, "these run Keras's own ops: the fused kernel would not compute the same") if kept else None,
    )


def swappable_layers(model) -> dict[str, tuple[object, Swap]]:
    """Every layer below `model` (nested models' and layers' included) a swap applies to, with that swap, by its
    path of names."""
    paths = {id(layer): path for path, layer in layer_paths(model).items()}
    found = {}
    for layer in model._flatten_layers(include_self=False):
        swap = next((s for s in SWAPS if isinstance(layer, s.stock) and s.candidate(layer)), None)
        if swap is not None:
            found[paths.get(id(layer), layer.name)] = (layer, swap)
    return found
