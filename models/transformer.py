"""Small transformer from Keras layers: an encoder classifier, or a causal language model.

Token inputs are embedded; images/tabular inputs become a sequence of patches
(image rows, or feature chunks) projected to embed_dim. Under task=sequence the attention is
causal and the head predicts the next token at every position.
"""

from __future__ import annotations

from launcher.config.errors import ConfigError
from launcher.train.model_io import PositionEmbedding, model_input, output_head


def check(cfg, source) -> None:
    if cfg.embed_dim % cfg.num_heads:
        raise ConfigError.single(
            "model.embed_dim",
            cfg.embed_dim,
            f"a multiple of model.num_heads ({cfg.num_heads})",
            f"model.embed_dim={cfg.num_heads * max(1, cfg.embed_dim // cfg.num_heads)}",
        )


def _to_sequence(inputs, cfg, source):
    import keras

    if source.kind == "tokens":
        vocab = int(source.vocab_size) if getattr(source, "vocab_size", None) else 0
        vocab = vocab or 1000
        return keras.layers.Embedding(vocab, cfg.embed_dim, name="embedding")(inputs)
    if source.kind == "image":
        height, width, channels = source.input_shape
        x = keras.layers.Reshape((height, width * channels))(inputs)
    else:
        features = source.input_shape[0]
        patch = cfg.patch_size or max(1, features // 8)
        if features % patch:
            raise ConfigError.single(
                "model.patch_size",
                patch,
                f"a divisor of the {features} input features",
                "model.patch_size=0 (automatic)",
            )
        x = keras.layers.Reshape((features // patch, patch))(inputs)
    return keras.layers.Dense(cfg.embed_dim, name="embedding")(x)


def build(cfg, source):
    import keras

    inputs = model_input(source)
    x = _to_sequence(inputs, cfg, source)
    x = PositionEmbedding(name="positions")(x)
    causal = getattr(source, "task", "classification") == "sequence"
    for i in range(cfg.num_layers):
        attention = keras.layers.MultiHeadAttention(
            cfg.num_heads, cfg.embed_dim // cfg.num_heads, dropout=cfg.dropout, name=f"attention_{i}"
        )(x, x, use_causal_mask=causal)
        x = keras.layers.LayerNormalization(epsilon=1e-6, name=f"attention_norm_{i}")(x + attention)
        ff = keras.layers.Dense(cfg.ff_dim, activation="gelu", name=f"ff_in_{i}")(x)
        ff = keras.layers.Dense(cfg.embed_dim, name=f"ff_out_{i}")(ff)
        if cfg.dropout:
            ff = keras.layers.Dropout(cfg.dropout)(ff)
        x = keras.layers.LayerNormalization(epsilon=1e-6, name=f"ff_norm_{i}")(x + ff)
    if not causal:
        x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(inputs, output_head(x, source), name="transformer")
