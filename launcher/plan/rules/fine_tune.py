"""Fine-tuning's keys together: what is frozen, when it trains again and at which rate, where the first weights
come from. Which layers a name matches is known once the model is built (`launcher.train.fine_tune`).

The same concept one level down: `launcher.train.fine_tune` applies what this rule decides to the
built model.
"""

from __future__ import annotations

from launcher.config.schema import Config
from launcher.plan.rules.findings import Findings


def check_fine_tuning(config: Config, found: Findings) -> None:
    model, train = config.model, config.train
    freeze = list(getattr(model, "freeze", []) or [])
    if train.unfreeze_at_epoch > 0 and not freeze:
        found.refuse(
            "train.unfreeze_at_epoch",
            train.unfreeze_at_epoch,
            "0 when model.freeze lists no layer (nothing to unfreeze)",
            "model.freeze=[<layer names or globs>] (or train.unfreeze_at_epoch=0)",
        )
    if train.unfreeze_learning_rate > 0 and train.unfreeze_at_epoch <= 0:
        found.refuse(
            "train.unfreeze_learning_rate",
            train.unfreeze_learning_rate,
            "0 unless train.unfreeze_at_epoch is set (it is the rate of the unfrozen phase)",
            "train.unfreeze_at_epoch=<epochs before unfreezing> (or train.unfreeze_learning_rate=0)",
        )
    if not train.unfreeze_batch_norm and train.unfreeze_at_epoch <= 0:
        found.refuse(
            "train.unfreeze_batch_norm",
            train.unfreeze_batch_norm,
            "true unless train.unfreeze_at_epoch is set (it keeps BatchNormalization frozen after the unfreeze)",
            "train.unfreeze_at_epoch=<epochs before unfreezing> (or train.unfreeze_batch_norm=true)",
        )
    if train.unfreeze_fresh_optimizer and train.unfreeze_at_epoch <= 0:
        found.refuse(
            "train.unfreeze_fresh_optimizer",
            train.unfreeze_fresh_optimizer,
            "false unless train.unfreeze_at_epoch is set (it starts the optimizer afresh at the unfreeze)",
            "train.unfreeze_at_epoch=<epochs before unfreezing> (or train.unfreeze_fresh_optimizer=false)",
        )
    if train.unfreeze_at_epoch >= train.epochs > 0 and freeze:
        found.warn(
            f"train.unfreeze_at_epoch={train.unfreeze_at_epoch} is not below train.epochs={train.epochs}: the frozen "
            "layers stay frozen for the whole run"
        )
    if getattr(model, "init_skip_mismatch", False) and not str(getattr(model, "init_from", "") or ""):
        found.warn("model.init_skip_mismatch=true without model.init_from: nothing is loaded, nothing skipped")
