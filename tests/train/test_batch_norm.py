"""The built model's BatchNormalization momenta (`launcher.train.batch_norm`): nested models' layers and the fused
swap included, by their path of names."""

from __future__ import annotations


def test_every_batch_normalization_layer_is_found_with_its_momentum():
    import keras

    from launcher.train.fused_batch_norm import FusedBatchNormalization

    inner = keras.Sequential(
        [keras.Input((4, 4, 2)), keras.layers.BatchNormalization(momentum=0.9, name="bn")], name="block"
    )
    inputs = keras.Input((4, 4, 2))
    x = inner(inputs)
    x = FusedBatchNormalization(name="fused")(x)
    outputs = keras.layers.Dense(3, name="head")(keras.layers.Flatten()(x))
    model = keras.Model(inputs, outputs)

    from launcher.train.batch_norm import batch_norm_momenta

    assert batch_norm_momenta(model) == {"block/bn": 0.9, "fused": 0.99}
