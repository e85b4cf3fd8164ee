"""model.layer_swaps: whether stock Keras layers are swapped for fused kernels that compute the same.

Which layers are swapped is known once the model is built: the same concept one level down,
`launcher.train.layer_swaps`, applies this decision to the built model and records each layer with its reason.
"""

from __future__ import annotations

from launcher.config.schema import Config
from launcher.plan.decisions import LayerSwapsPlan, StrategyPlan
from launcher.plan.environment import Environment
from launcher.plan.rules.findings import Findings

CHOICES = ("auto", "off")


def decide_layer_swaps(config: Config, env: Environment, found: Findings, strategy: StrategyPlan) -> LayerSwapsPlan:
    asked = str(getattr(config.model, "layer_swaps", "auto"))
    mode = asked.strip().lower()
    if mode not in CHOICES:
        found.refuse(
            "model.layer_swaps",
            asked,
            f"one of {list(CHOICES)}",
            "model.layer_swaps=auto (fused kernels where they compute what Keras's layers do), or "
            "model.layer_swaps=off (every layer as stock Keras)",
        )
        return LayerSwapsPlan.of(mode=(asked, f"refused: not one of {list(CHOICES)}"))
    if mode == "off":
        return LayerSwapsPlan.of(mode=("off", "model.layer_swaps=off: every layer runs Keras's own ops"))
    if env.tuned is not None and env.tuned.layer_swaps == "off":
        return LayerSwapsPlan.of(
            mode=(
                "off",
                f"model.layer_swaps=auto, tune: this model's step timed faster with every layer as stock Keras "
                f"here ({env.tuned.table})",
            )
        )
    kernel = "cuDNN on GPU" if env.gpus else "oneDNN on CPU"
    synchronized = (
        f"; synchronized=True layers train on Keras's statistics all-reduced across the {strategy.replicas} replicas"
        if strategy.replicas > 1
        else ""
    )
    return LayerSwapsPlan.of(
        mode=(
            "auto",
            f"BatchNormalization runs one FusedBatchNormV3 kernel ({kernel}) where it computes what Keras's ops do "
            f"(4-D channels-last inputs, no mask, float32/16 or bfloat16, no renorm){synchronized}; a Dense with a "
            "GELU or SiLU activation runs its bias add and activation as one compiled float32 cluster (XLA), its "
            "matmul as before; the build records each layer (model.swapped_layers)",
        )
    )
