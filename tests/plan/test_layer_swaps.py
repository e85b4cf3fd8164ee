"""model.layer_swaps in the Plan (`launcher.plan.rules.layer_swaps`): the decision with its reason, `off`, and a value
it refuses.

Which layers the build swaps is `launcher.train.layer_swaps` (tests/train/test_fused_batch_norm.py,
tests/train/test_fused_activation.py).
"""

from __future__ import annotations

import pytest
import yaml
from fakes import CPU_AMX, CPU_PLAIN, EIGHT_A100
from support.config import config

from launcher.config.errors import ConfigError
from launcher.config.models import TRAINING_KEYS
from launcher.plan.resolve import resolve


def test_swaps_are_on_by_default_and_the_plan_says_which_kernel_and_when():
    plan = resolve(config("model=cnn"), CPU_AMX)
    assert plan.layer_swaps.on and plan.layer_swaps.mode == "auto"
    reason = plan.layer_swaps.reason("mode")
    assert "FusedBatchNormV3" in reason and "oneDNN on CPU" in reason and "4-D channels-last" in reason
    assert "a Dense with a GELU or SiLU activation" in reason and "one compiled float32 cluster" in reason
    assert "synchronized" not in reason  # one replica: nothing to all-reduce
    written = yaml.safe_load(plan.to_yaml())["decisions"]["model.layer_swaps"]
    assert written == {"value": "auto", "reason": reason}


def test_under_several_replicas_synchronized_layers_keep_keras_s_statistics():
    reason = resolve(config("model=cnn", "strategy=mirrored"), CPU_PLAIN).layer_swaps.reason("mode")
    assert "synchronized=True layers train on Keras's statistics all-reduced across the 2 replicas" in reason
    assert "cuDNN on GPU" in resolve(config("model=cnn"), EIGHT_A100).layer_swaps.reason("mode")


@pytest.mark.parametrize("value", ["off", "OFF"])
def test_off_turns_every_swap_off(value):
    plan = resolve(config("model=cnn", f"model.layer_swaps={value}"), CPU_AMX)
    assert not plan.layer_swaps.on
    assert plan.values()["model.layer_swaps"] == "off"
    assert "Keras's own ops" in plan.layer_swaps.reason("mode")


def test_an_unknown_value_is_refused_with_the_key_the_choices_and_the_fix():
    with pytest.raises(ConfigError) as err:
        resolve(config("model=mlp", "model.layer_swaps=fused"), CPU_PLAIN)
    message = str(err.value)
    assert "model.layer_swaps='fused'" in message and "one of ['auto', 'off']" in message
    assert "fix: model.layer_swaps=auto" in message and "model.layer_swaps=off" in message


def test_a_resumed_run_may_change_it_checkpoints_are_the_same():
    assert "layer_swaps" in TRAINING_KEYS
