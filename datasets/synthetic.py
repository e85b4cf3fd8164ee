"""Seeded synthetic classification data that a model can actually learn.

Each class has a random prototype; examples are prototype + noise (image and
tabular) or tokens drawn from a class-specific distribution (tokens).
"""

from __future__ import annotations

import numpy as np

from launcher.config.errors import ConfigError
from launcher.train.data import DataSource, split_arrays


def load(cfg) -> DataSource:
    kind = cfg.kind.value if hasattr(cfg.kind, "value") else str(cfg.kind)
    if cfg.num_examples < 2 or cfg.num_classes < 2:
        raise ConfigError.single(
            "dataset.num_examples" if cfg.num_examples < 2 else "dataset.num_classes",
            cfg.num_examples if cfg.num_examples < 2 else cfg.num_classes,
            "an integer >= 2", "dataset.num_examples=2048 dataset.num_classes=10",
        )
    dims = {"image": 3, "tabular": None, "tokens": 1}[kind]
    if not cfg.shape or min(cfg.shape) < 1 or (dims and len(cfg.shape) != dims):
        shown = {"image": "[H, W, C], e.g. [16,16,3]", "tabular": "[features], e.g. [32]",
                 "tokens": "[length], e.g. [64]"}[kind]
        raise ConfigError.single("dataset.shape", list(cfg.shape), f"positive sizes for {kind} inputs: {shown}",
                                 f"dataset.shape={shown.split('e.g. ')[1]}")
    rng = np.random.default_rng(cfg.seed)
    y = rng.integers(0, cfg.num_classes, size=cfg.num_examples)
    if kind == "tokens":
        x = _tokens(rng, y, cfg)
    else:
        shape = tuple(cfg.shape)
        if kind == "tabular":
            shape = (int(np.prod(shape)),)
        prototypes = rng.normal(size=(cfg.num_classes, *shape)).astype("float32")
        x = prototypes[y] + rng.normal(scale=1.0, size=(cfg.num_examples, *shape)).astype("float32")
    return split_arrays(x, y, cfg.validation_split, cfg.shuffle_seed, cfg.limit, kind, cfg.num_classes)


def _tokens(rng, y, cfg) -> np.ndarray:
    length = int(cfg.shape[0])
    vocab = int(cfg.vocab_size)
    if vocab < cfg.num_classes:
        raise ConfigError.single(
            "dataset.vocab_size",
            vocab,
            f">= num_classes ({cfg.num_classes})",
            f"dataset.vocab_size={cfg.num_classes * 10}",
        )
    # Half the tokens are the class's marker tokens, the rest uniform noise.
    markers = rng.integers(0, vocab, size=(cfg.num_classes, 4))
    noise = rng.integers(0, vocab, size=(len(y), length))
    use_marker = rng.random(size=(len(y), length)) < 0.5
    picks = markers[y][np.arange(len(y))[:, None], rng.integers(0, 4, size=(len(y), length))]
    return np.where(use_marker, picks, noise).astype("int32")
