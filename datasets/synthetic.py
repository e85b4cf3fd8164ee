"""Seeded synthetic data that a model can actually learn, for every task.

classification: each class has a random prototype; examples are prototype + noise (image and
tabular) or tokens drawn from a class-specific distribution (tokens). multilabel: label j is on when
the example's projection on a random direction j is positive (num_classes labels). regression: a
random linear function of the inputs plus a little noise. sequence: token runs that count up by a
per-sequence stride (mod the vocabulary), padded to the length with 0; y is x shifted by one.
"""

from __future__ import annotations

import numpy as np

from launcher.config.errors import ConfigError
from launcher.train.data import DataSource, split_arrays


def load(cfg, task: str = "classification") -> DataSource:
    kind = cfg.kind.value if hasattr(cfg.kind, "value") else str(cfg.kind)
    if task == "sequence":
        return _sequences(cfg)
    if cfg.num_examples < 2 or cfg.num_classes < 2:
        raise ConfigError.single(
            "dataset.num_examples" if cfg.num_examples < 2 else "dataset.num_classes",
            cfg.num_examples if cfg.num_examples < 2 else cfg.num_classes,
            "an integer >= 2",
            "dataset.num_examples=2048 dataset.num_classes=10",
        )
    dims = {"image": 3, "tabular": None, "tokens": 1}[kind]
    if not cfg.shape or min(cfg.shape) < 1 or (dims and len(cfg.shape) != dims):
        shown = {
            "image": "[H, W, C], e.g. [16,16,3]",
            "tabular": "[features], e.g. [32]",
            "tokens": "[length], e.g. [64]",
        }[kind]
        raise ConfigError.single(
            "dataset.shape",
            list(cfg.shape),
            f"positive sizes for {kind} inputs: {shown}",
            f"dataset.shape={shown.split('e.g. ')[1]}",
        )
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
    if task in ("multilabel", "regression"):
        y = _dense_targets(rng, x, task, cfg.num_classes)
    return split_arrays(
        x,
        y,
        cfg.validation_split,
        cfg.shuffle_seed,
        cfg.limit,
        kind,
        cfg.num_classes if task != "regression" else 1,
        test_split=cfg.test_split,
    )


def _dense_targets(rng, x, task: str, labels: int) -> np.ndarray:
    """Multi-label 0/1 rows or one real target, each a (thresholded) linear function of the inputs."""
    flat = x.reshape(len(x), -1).astype("float32")
    flat = (flat - flat.mean(axis=0)) / (flat.std(axis=0) + 1e-6)
    if task == "multilabel":
        directions = rng.normal(size=(flat.shape[1], labels)).astype("float32")
        return (flat @ directions > 0).astype("float32")
    weights = rng.normal(size=(flat.shape[1],)).astype("float32") / np.sqrt(flat.shape[1])
    return (flat @ weights + rng.normal(scale=0.05, size=len(flat))).astype("float32")


def _sequences(cfg) -> DataSource:
    """Counting runs: token t+1 = token t + stride (mod vocab, skipping the pad id 0), random lengths."""
    rng = np.random.default_rng(cfg.seed)
    length, vocab = int(cfg.shape[-1]), int(cfg.vocab_size)
    if vocab < 4 or length < 2:
        raise ConfigError.single(
            "dataset.vocab_size" if vocab < 4 else "dataset.shape",
            vocab if vocab < 4 else list(cfg.shape),
            "vocab_size >= 4 and a sequence length >= 2 for task=sequence",
            "dataset.kind=tokens dataset.shape=[16] dataset.vocab_size=32",
        )
    n = cfg.num_examples
    starts = rng.integers(1, vocab, size=(n, 1))
    strides = rng.integers(1, 4, size=(n, 1))
    tokens = 1 + (starts - 1 + strides * np.arange(length + 1)) % (vocab - 1)
    lengths = rng.integers(length // 2 + 1, length + 2, size=(n, 1))
    tokens = np.where(np.arange(length + 1) < lengths, tokens, 0).astype("int32")
    x, y = tokens[:, :-1], tokens[:, 1:]
    source = split_arrays(x, y, cfg.validation_split, cfg.shuffle_seed, cfg.limit, "tokens", vocab, cfg.test_split)
    source.vocab_size = vocab
    return source


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
