"""Fine-tuning on the built model: weights from a trained source by layer name and shape, layers frozen by name
or glob, and the unfreeze that trains them again later.

Layers are matched by their path of names (`block/conv`), so the built-in models name every layer that holds
weights; a user's model matches as well as its names are stable.

The same concept one level up: `launcher.plan.rules.fine_tune` decides what is applied here.
"""

from __future__ import annotations

import fnmatch

import numpy as np

from launcher.config.errors import ConfigError, Violation
from launcher.plan.decisions import FreezePlan, InitPlan


def layer_paths(model) -> dict[str, object]:
    """Every layer below `model` by its path of names, nested models' layers included (`resnet50/conv1_conv`)."""
    found: dict[str, object] = {}

    def walk(layer, prefix: str) -> None:
        for child in getattr(layer, "layers", []):
            path = f"{prefix}{child.name}"
            found.setdefault(path, child)
            walk(child, f"{path}/")

    walk(model, "")
    return found


def weight_layers(model) -> dict[str, object]:
    """The layers that hold weights themselves (not only through their children)."""
    return {path: layer for path, layer in layer_paths(model).items() if layer.weights and not hasattr(layer, "layers")}


def load_matching(model, source_model, shown: str, skip_mismatch: bool, key: str = "model.init_from") -> InitPlan:
    """Copy `source_model`'s weights into `model` layer by layer where names and shapes agree; the rest is refused,
    or (skip_mismatch) left at its initial values and listed."""
    mine, theirs = weight_layers(model), weight_layers(source_model)
    pairs, skipped = [], []
    for path, layer in mine.items():
        other = theirs.get(path)
        if other is None:
            skipped.append(f"{path} (not in the source)")
            continue
        shapes = [tuple(w.shape) for w in layer.weights], [tuple(w.shape) for w in other.weights]
        if shapes[0] != shapes[1]:
            skipped.append(f"{path} (shapes {shapes[0]} here, {shapes[1]} in the source)")
            continue
        pairs.append((path, layer, other))
    if not pairs or (skipped and not skip_mismatch):
        raise ConfigError(
            [
                Violation(
                    key,
                    shown,
                    "a source whose layers match this model's by name and shape"
                    + (f"; these do not: {skipped[:8]}" if skipped else "")
                    + ("" if pairs else "; none does"),
                    "model.init_skip_mismatch=true to leave them at their initial values (a new head)"
                    if pairs
                    else "init_from a model of this architecture (same layer names), or train from scratch",
                )
            ]
        )
    for _, layer, other in pairs:
        for variable, value in zip(layer.weights, other.weights, strict=True):
            variable.assign(np.asarray(value.numpy()).astype(variable.dtype))
    loaded = [path for path, _, _ in pairs]
    why = f"{len(loaded)} layer(s) by name and shape from {shown}; a fresh optimizer at step 0"
    return InitPlan.of(
        source=(shown, "model.init_from"),
        loaded=(loaded, why),
        skipped=(skipped, "model.init_skip_mismatch=true: left at their initial values") if skipped else None,
    )


def frozen_layers(model, patterns: list[str]) -> list:
    """The layers `patterns` (names or globs, of a layer's name or its path) match; refused when one matches none."""
    paths = layer_paths(model)
    chosen: dict[int, object] = {}
    unmatched = []
    for pattern in patterns:
        hits = [
            layer
            for path, layer in paths.items()
            if fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(layer.name, pattern)
        ]
        if not hits:
            unmatched.append(pattern)
        chosen.update({id(layer): layer for layer in hits})
    if unmatched:
        shown = [path for path, layer in paths.items() if layer.weights][:30]
        raise ConfigError.single(
            "model.freeze",
            list(patterns),
            f"names or globs of layers of the built model (no layer matches {unmatched}; layers with weights: {shown})",
            f"model.freeze=[{shown[0] if shown else '<layer>'}]",
        )
    return list(chosen.values())


def freeze_record(model, layers: list, batch_norm: bool = True) -> FreezePlan:
    """What freezing `layers` leaves trainable, counted before anything is frozen; `batch_norm=False`: their
    BatchNormalization stays frozen after the unfreeze (train.unfreeze_batch_norm)."""
    frozen = {id(w): int(np.prod(w.shape)) for layer in layers for w in layer.trainable_weights}
    total = {id(w): int(np.prod(w.shape)) for w in model.trainable_weights}
    names = sorted(layer.name for layer in layers)
    return FreezePlan.of(
        frozen=(
            names,
            "model.freeze; BatchNormalization in them runs in inference mode"
            + ("" if batch_norm else ", after train.unfreeze_at_epoch too (train.unfreeze_batch_norm=false)"),
        ),
        trainable_parameters=(sum(total.values()) - sum(frozen.values()), "what the optimizer updates while frozen"),
        frozen_parameters=(sum(frozen.values()), "not updated until train.unfreeze_at_epoch (if set)"),
    )


class Freezer:
    """model.freeze's layers: frozen until `unfreeze_at` epochs are done (0: for the whole run). The phase follows
    the epoch, so a resumed run lands in the phase an uninterrupted one is in. `batch_norm=False` keeps every
    BatchNormalization in them frozen after the unfreeze: a frozen one runs in inference mode, its statistics kept.
    `fresh_at`: the global step of the unfreeze when `optimizer` starts afresh there (train.unfreeze_fresh_optimizer),
    its schedule read on from that step: restarted when the unfrozen phase's first epoch starts (a run stopped at the
    unfreeze too), not when a run resumes later in the phase (its checkpoint holds the fresh optimizer's state)."""

    def __init__(
        self, layers: list, unfreeze_at: int = 0, batch_norm: bool = True, fresh_at: int | None = None, optimizer=None
    ):
        self.layers = layers
        self.unfreeze_at = unfreeze_at
        self.batch_norm = batch_norm
        self.fresh_at, self.optimizer = fresh_at, optimizer
        self.frozen: bool | None = None

    def set_for(self, epoch: int, step_in_epoch: int = 0) -> bool:
        """Freeze or unfreeze for `epoch` (0-based), entered at `step_in_epoch` (a resumed run mid-epoch); True when
        that changed what trains (the step must be retraced)."""
        frozen = not self.unfreeze_at or epoch < self.unfreeze_at
        if frozen == self.frozen:
            return False
        for layer in self.layers:
            layer.trainable = not frozen
        if not frozen and not self.batch_norm:
            for norm in batch_norms(self.layers):
                norm.trainable = False
        if not frozen and self.fresh_at is not None:
            from launcher.train.fresh_optimizer import continue_schedule, restart

            continue_schedule(self.optimizer, self.fresh_at)
            if epoch == self.unfreeze_at and step_in_epoch == 0:  # at the unfreeze, not later in the phase
                restart(self.optimizer)
        self.frozen = frozen
        return True


def batch_norms(layers: list) -> list:
    """Every BatchNormalization among `layers` and inside them (a nested model's, a block's)."""
    import keras

    found = {}
    for layer in layers:
        for inner in [layer, *layer._flatten_layers(include_self=False)]:
            if isinstance(inner, keras.layers.BatchNormalization):
                found[id(inner)] = inner
    return list(found.values())
