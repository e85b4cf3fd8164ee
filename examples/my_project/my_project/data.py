"""Breast-cancer diagnosis (569 examples, 30 features), bundled with scikit-learn: no download."""

import numpy as np
from sklearn.datasets import load_breast_cancer


def load(validation_fraction: float = 0.25, seed: int = 0):
    """Standardised features and 0/1 labels, split once: {"train": (x, y), "val": (x, y)}."""
    x, y = load_breast_cancer(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order].astype("float32"), y[order].astype("int64")
    cut = int(len(x) * (1 - validation_fraction))
    mean, std = x[:cut].mean(axis=0), x[:cut].std(axis=0) + 1e-6  # statistics of the training split only
    x = (x - mean) / std
    return {"train": (x[:cut], y[:cut]), "val": (x[cut:], y[cut:])}
