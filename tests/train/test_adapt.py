"""model.adapt (`launcher.train.adapt`): a person's preprocessing layers adapted once on the training split alone,
before the model is built in the scope, handed to the builder, recorded in the Plan, saved beside the checkpoints
and read back by a resumed run instead of adapting again."""

from __future__ import annotations

import numpy as np
import pytest
from support.config import compose, config

from launcher.config.errors import ConfigError
from launcher.plan.decisions import InputsPlan
from launcher.train.registry import DATASETS

CUSTOM = ["model=custom", "model.builder=user_parts:normalized", "dataset=custom", "dataset.loader=user_parts:shifted"]


def _adapted(*overrides: str, checkpoints=None):
    import tensorflow as tf

    from launcher.train.adapt import adapt_once
    from launcher.train.labels import fit_to_task

    cfg = config(*CUSTOM, *overrides)
    source = fit_to_task(DATASETS.get("custom").load(cfg.dataset), "classification")
    return adapt_once(cfg.model, source, tf.distribute.get_strategy(), checkpoints)


def test_lookup_vocabularies_are_saved_whole_and_read_back(tmp_path):
    """A StringLookup's and a TextVectorization's vocabularies are no checkpoint variables: adapted.keras keeps them."""
    import tensorflow as tf

    from launcher.train.adapt import ADAPTED_FILE, save_adapted

    adapted = _adapted("model.adapt=user_parts:adapt_words")
    assert adapted.fresh and adapted.described["lookup"] == "StringLookup (vocabulary of 5)"
    save_adapted(adapted, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [ADAPTED_FILE]
    again = _adapted("model.adapt=user_parts:adapt_words", checkpoints=tmp_path)
    assert not again.fresh and "read back from" in again.reason
    words = tf.constant(["sky", "red", "unknown"])
    for name in ("lookup", "vectorize"):
        np.testing.assert_array_equal(again.layers[name](words), adapted.layers[name](words))


def test_an_adapt_of_another_signature_or_that_returns_no_layers_and_a_builder_without_adapted_are_refused():
    with pytest.raises(ConfigError, match=r"model.adapt='user_parts:linear': expected a callable adapt\(spec, train\)"):
        _adapted("model.adapt=user_parts:linear")
    with pytest.raises(ConfigError, match=r"returns its adapted Keras layers by name \(it returned NoneType\)"):
        _adapted("model.adapt=user_parts:adapt_nothing")
    from launcher.train.user_model import check

    cfg = config(*CUSTOM, "model.builder=user_parts:linear", "model.adapt=user_parts:adapt_normalizer")
    source = DATASETS.get("custom").load(cfg.dataset)
    with pytest.raises(ConfigError, match=r"model.builder='user_parts:linear': expected a callable build\(spec, adapt"):
        check(cfg.model, source)


@pytest.mark.slow  # two short trainings in this process
def test_adapted_on_the_training_split_once_and_a_resumed_run_reads_it_back(tmp_path):
    """Issue 63, item 3: keras.io adapts on its training data before building; the builder had no training data."""
    import user_parts

    from launcher.launch.training import execute

    user_parts.ADAPTED_ON.clear()
    settings = [
        *CUSTOM,
        "model.adapt=user_parts:adapt_normalizer",
        "strategy=mirrored",
        "precision=fp32",
        "scaling.batch_size=32",
        "tracking.enabled=false",
    ]
    first = execute(compose(*settings, "train.epochs=1"), tmp_path / "run", tmp_path)
    assert first.error is None
    (seen,) = user_parts.ADAPTED_ON
    train_x = user_parts.shifted()["train"][0]
    assert len(seen) == len(train_x) and sorted(seen[:, 0]) == pytest.approx(sorted(train_x[:, 0]))
    mean = first.model.get_layer("normalizer").mean
    np.testing.assert_allclose(np.ravel(mean), train_x.mean(axis=0), rtol=1e-4)  # train's, not val's or test's
    plan = first.plan.values()
    assert plan["model.adapted"]["x"] == "Normalization (variables (3,), (3,), ())"
    assert "on the training split alone (192 examples" in first.plan.record(InputsPlan).reason("adapted")

    resumed = execute(compose(*settings, "train.epochs=2"), tmp_path / "run", tmp_path)
    assert resumed.error is None and len(resumed.history) == 2
    assert len(user_parts.ADAPTED_ON) == 1  # not adapted again
    assert "read back from" in resumed.plan.record(InputsPlan).reason("adapted")
    np.testing.assert_allclose(np.ravel(resumed.model.get_layer("normalizer").mean), np.ravel(mean))


def test_adapt_runs_under_the_float32_policy_whatever_the_plans():
    """Normalization.adapt on a tf.data fails under mixed_bfloat16 (cannot compute AddV2): adapt runs as Keras does."""
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        adapted = _adapted("model.adapt=user_parts:adapt_normalizer")
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert adapted.layers["x"].dtype_policy.name == "float32"


def test_a_builder_called_without_adapted_layers_gets_them_adapted_on_the_training_split():
    """The doctor builds the model itself (`MODELS.get(...).build(cfg, source)`): the adapt function runs for it."""
    import user_parts

    from launcher.train.labels import fit_to_task
    from launcher.train.user_model import build

    user_parts.ADAPTED_ON.clear()
    cfg = config(*CUSTOM, "model.adapt=user_parts:adapt_normalizer")
    model = build(cfg.model, fit_to_task(DATASETS.get("custom").load(cfg.dataset), "classification"))
    (seen,) = user_parts.ADAPTED_ON
    np.testing.assert_allclose(np.ravel(model.get_layer("normalizer").mean), seen.mean(axis=0), rtol=1e-4)
