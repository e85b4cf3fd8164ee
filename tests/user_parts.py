"""A user's components for in-process tests, named by import path (tests/ is on the path)."""

from __future__ import annotations

import keras
import numpy as np

SEEN: list[dict] = []  # what RecordingCallback saw, one entry per epoch


def tf_data(n: int = 256, features: int = 6):
    """{"train": ds, "val": ds} of unbatched tf.data (x, y); targets a linear function of x."""
    import tensorflow as tf

    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, features)).astype("float32")
    y = (x @ rng.normal(size=(features,))).astype("float32")
    cut = n * 3 // 4
    return {
        "train": tf.data.Dataset.from_tensor_slices((x[:cut], y[:cut])),
        "val": tf.data.Dataset.from_tensor_slices((x[cut:], y[cut:])),
    }


class DoubledSquaredError(keras.losses.Loss):
    """2 x MSE: a Loss class the launcher instantiates unreduced."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def call(self, y_true, y_pred):
        return 2.0 * keras.ops.mean(keras.ops.square(y_true - y_pred), axis=-1)


class RecordingCallback(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        SEEN.append({"epoch": epoch, **(logs or {})})


def linear(spec):
    inputs = keras.Input(spec.input_shape)
    return keras.Model(inputs, keras.layers.Dense(spec.outputs)(inputs))


def wrong_width(spec):
    """One output too many for the task's head."""
    inputs = keras.Input(spec.input_shape)
    return keras.Model(inputs, keras.layers.Dense(spec.outputs + 1)(inputs))


CACHED: list = []


def cached(spec):
    """Returns the model it built first, wherever that was: built outside the strategy scope, it is refused."""
    if not CACHED:
        CACHED.append(linear(spec))
    return CACHED[0]


class HalfStepSGD(keras.optimizers.SGD):
    """A user's optimizer by import path (optimizer.name=user_parts:HalfStepSGD)."""


def halving(initial_learning_rate, decay_steps, every):
    """A user's schedule by import path: halves the rate every `every` steps (decay_steps unused)."""
    return keras.optimizers.schedules.ExponentialDecay(initial_learning_rate, every, 0.5, staircase=True)


def words_with_a_lookup_table(n: int = 96):
    """Raw strings in tf.data and an adapted TextVectorization (a lookup table) as the "preprocess" (its SavedModel
    export failed with `untracked resource` until the launcher tracked the table; TFLite has no string ops)."""
    import keras
    import tensorflow as tf

    words = np.array(["red green", "blue sky", "green grass", "sky blue", "red rose", "grass green"] * (n // 6))
    labels = np.array([0, 1, 0, 1, 0, 0] * (n // 6), dtype="int64")
    vectorize = keras.layers.TextVectorization(max_tokens=16, output_mode="multi_hot")
    vectorize.adapt(words)
    split = n * 3 // 4
    return {
        "train": tf.data.Dataset.from_tensor_slices((words[:split], labels[:split])),
        "val": tf.data.Dataset.from_tensor_slices((words[split:], labels[split:])),
        "preprocess": vectorize,
    }


class WeightsNpz:
    """An export writer: every weight of the trained model, by its path, in one .npz file."""

    written = "weights.npz"

    def write(self, model, path):
        np.savez(path, **{w.path.replace("/", "."): np.asarray(w) for w in model.weights})


class RefusingWriter:
    """An export writer that cannot write any model."""

    written = "never.bin"

    def write(self, model, path):
        raise RuntimeError("this writer takes no model with Dense layers")


class HalfWriter:
    """Not an export writer: it says what it writes but has no write."""

    written = "half.bin"


class ClobberingWriter(WeightsNpz):
    """Not an export writer: it would replace the run's model.keras."""

    written = "model.keras"


class EscapingWriter(WeightsNpz):
    """Not an export writer: it would write outside the run dir."""

    written = "../weights.npz"


class IdleWriter:
    """An export writer that returns without writing its file."""

    written = "nothing.bin"

    def write(self, model, path):
        pass


COLORS = ("red", "green", "blue")


def string_categories(n: int = 120):
    """A pandas DataFrame of a string category and a number (keras.io's structured data form), split by the launcher:
    the class is whether the color is red or the size large."""
    import pandas as pd

    rng = np.random.default_rng(3)
    color = rng.choice(COLORS, size=n)
    size = rng.normal(size=n).astype("float32")
    label = ((color == "red") | (size > 1.0)).astype("int64")
    return pd.DataFrame({"color": color, "size": size}), label


def string_lookup_model(spec):
    """A StringLookup inside the model reads the raw color; the size goes in as it is."""
    color = keras.Input((1,), dtype="string", name="color")
    size = keras.Input((1,), name="size")
    one_hot = keras.layers.StringLookup(vocabulary=list(COLORS), output_mode="one_hot")(color)
    hidden = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()([one_hot, size]))
    return keras.Model({"color": color, "size": size}, keras.layers.Dense(spec.outputs)(hidden))


def feature_space(n: int = 96):
    """keras.io's structured-data form: named raw features (a string category, a number) and an adapted Keras
    FeatureSpace as the "preprocess", joining them into one tensor (it was refused: a dict in must give a dict out;
    and under mixed_bfloat16 its adapt failed: cannot compute AddV2 ... bfloat16)."""
    import tensorflow as tf

    x, label = string_categories(n)
    features = {"color": x["color"].to_numpy(), "size": x["size"].to_numpy()}
    space = keras.utils.FeatureSpace(
        features={
            "color": keras.utils.FeatureSpace.string_categorical(num_oov_indices=1),
            "size": keras.utils.FeatureSpace.float_normalized(),
        },
        output_mode="concat",
    )
    cut = n * 3 // 4
    space.adapt(tf.data.Dataset.from_tensor_slices({k: v[:cut] for k, v in features.items()}).batch(32))
    return {
        "train": ({k: v[:cut] for k, v in features.items()}, label[:cut]),
        "val": ({k: v[cut:] for k, v in features.items()}, label[cut:]),
        "preprocess": space,
    }


def adapts_in_the_builder(spec):
    """keras.io's habit: a Normalization adapted on a tf.data in the builder (plain Keras fails so under
    mixed_bfloat16: cannot compute AddV2 ... bfloat16)."""
    import tensorflow as tf

    normalize = keras.layers.Normalization()
    normalize.adapt(tf.data.Dataset.from_tensor_slices(np.ones((8, *spec.input_shape), "float32")).batch(4))
    inputs = keras.Input(spec.input_shape)
    return keras.Model(inputs, keras.layers.Dense(spec.outputs)(normalize(inputs)))
