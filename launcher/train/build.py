"""Build everything that creates variables, in one place, inside strategy.scope().

The strategy and the dtype policy come from `runtime.configure`, which runs first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import keras

from launcher.config.registry import MODELS
from launcher.train import loss_scale
from launcher.train.fused_update import FUSED
from launcher.train.schedules import learning_rate


@dataclass
class Built:
    strategy: Any
    model: Any
    optimizer: Any
    # Builds an independent twin (fresh variables): used to verify checkpoints restore.
    rebuild: Any = None


def make_optimizer(cfg, lr, fused: bool = False):
    """The configured Keras optimizer; `fused` swaps in its one-kernel-per-variable twin."""
    name = cfg.name.value
    clip = {"clipnorm": cfg.clipnorm} if cfg.clipnorm else {}
    if name == "sgd":
        cls, kwargs = keras.optimizers.SGD, {"momentum": cfg.momentum}
    elif name == "adamw":
        cls, kwargs = keras.optimizers.AdamW, {"weight_decay": cfg.weight_decay or 0.004}
    else:
        cls, kwargs = keras.optimizers.Adam, {}
    return (FUSED[cls] if fused else cls)(lr, **kwargs, **clip)


def float32_output(model):
    """Guarantee float32 logits whatever the builder did (mixed policies need the range)."""
    if model.outputs[0].dtype == "float32":
        return model
    out = keras.layers.Activation("linear", dtype="float32", name="logits_float32")(model.outputs[0])
    return keras.Model(model.inputs, out, name=model.name)


def build(cfg, plan, source, strategy) -> Built:
    with strategy.scope():
        model = float32_output(MODELS.get(cfg.model.name).build(cfg.model, source))
        fused = plan.get("optimizer.update") == "fused"
        inner = make_optimizer(cfg.optimizer, learning_rate(plan, cfg.optimizer), fused)
        optimizer = loss_scale.wrap(inner, plan, cfg.loss_scale)
        optimizer.build(model.trainable_variables)
    return Built(strategy=strategy, model=model, optimizer=optimizer,
                 rebuild=lambda: build(cfg, plan, source, strategy))
