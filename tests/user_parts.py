"""A user's components for in-process tests, named by import path (tests/ is on the path)."""

from __future__ import annotations

import keras
import numpy as np

SEEN: list[dict] = []  # what RecordingCallback saw, one entry per epoch


def tf_data(n: int = 256, features: int = 6, train_weights: bool = False):
    """{"train": ds, "val": ds} of unbatched tf.data (x, y); targets a linear function of x. `train_weights`: the
    training split is (x, y, sample_weight) (0.5 or 1.5 each), validation stays (x, y)."""
    import tensorflow as tf

    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, features)).astype("float32")
    y = (x @ rng.normal(size=(features,))).astype("float32")
    cut = n * 3 // 4
    weights = (np.arange(cut) % 2 + 0.5).astype("float32")
    train = (x[:cut], y[:cut], weights) if train_weights else (x[:cut], y[:cut])
    return {
        "train": tf.data.Dataset.from_tensor_slices(train),
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


ADAPTED_ON: list[np.ndarray] = []  # what adapt_normalizer was handed, one entry per call


def shifted(n: int = 192):
    """Splits far apart: train x ~ N(5, 2), val ~ N(-5, 1), test ~ N(50, 1); a normalizer adapted on anything but
    train is far off."""
    rng = np.random.default_rng(3)

    def split(count, mean, scale):
        x = rng.normal(mean, scale, size=(count, 3)).astype("float32")
        return x, (x[:, 0] > mean).astype("int64")

    return {"train": split(n, 5.0, 2.0), "val": split(64, -5.0, 1.0), "test": split(32, 50.0, 1.0)}


def adapt_normalizer(spec, train):
    """keras.io's form: a Normalization adapted on the training features."""
    ADAPTED_ON.append(np.concatenate([x.numpy() for x, *_ in train]))
    normalizer = keras.layers.Normalization(name="normalizer")
    normalizer.adapt(train.map(lambda x, *_: x))
    return {"x": normalizer}


def adapt_words(spec, train):
    """A StringLookup and a TextVectorization adapted on words (the state a checkpoint does not hold)."""
    words = np.array(["red", "green", "blue", "red", "sky"])
    lookup, vectorize = keras.layers.StringLookup(), keras.layers.TextVectorization(output_mode="multi_hot")
    lookup.adapt(words)
    vectorize.adapt(words)
    return {"lookup": lookup, "vectorize": vectorize}


def normalized(spec, adapted, units: int = 8):
    """The adapted normalizer inside the model, as keras.io builds it."""
    inputs = keras.Input(spec.input_shape)
    hidden = keras.layers.Dense(units, activation="relu")(adapted["x"](inputs))
    return keras.Model(inputs, keras.layers.Dense(spec.outputs)(hidden))


def adapt_nothing(spec, train):
    """Adapts nothing and returns None: refused, naming what adapt must return."""


def rescaled(spec, units: int = 8):
    """keras.io's image classifier from scratch begins with its own Rescaling(1/255): it takes 0-255 pixels."""
    inputs = keras.Input(spec.input_shape)
    x = keras.layers.Flatten()(keras.layers.Rescaling(1.0 / 255, name="rescale")(inputs))
    return keras.Model(inputs, keras.layers.Dense(spec.outputs)(keras.layers.Dense(units, activation="relu")(x)))


def pixels(n: int = 48):
    """A person's own image loader: 8x8 RGB images as 0-255 pixels, declared `"raw_images": True`."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, size=(n, 8, 8, 3)).astype("uint8")
    y = (x[..., 0].mean(axis=(1, 2)) > x[..., 1].mean(axis=(1, 2))).astype("int64")
    return {"train": (x[:36], y[:36]), "val": (x[36:], y[36:]), "raw_images": True}


def shifted_raw():
    """Tabular features declared as raw images: refused."""
    return {**shifted(), "raw_images": True}


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


def ids(n: int = 160):
    """Integer ids (a store, a product) as numbers: the class is whether the id is one of the first three."""
    rng = np.random.default_rng(4)
    x = rng.integers(10, 16, size=(n, 1)).astype("int64")
    return {
        "train": (x[: n * 3 // 4], (x[: n * 3 // 4, 0] < 13).astype("int64")),
        "val": (x[n * 3 // 4 :], (x[n * 3 // 4 :, 0] < 13).astype("int64")),
    }


def ids_lookup_model(spec):
    """An IntegerLookup inside the model reads the raw ids: a layer Keras marks supports_jit=False."""
    inputs = keras.Input((1,), dtype="int64", name="ids")
    one_hot = keras.layers.IntegerLookup(vocabulary=list(range(10, 16)), output_mode="one_hot", name="ids_lookup")(
        inputs
    )
    hidden = keras.layers.Dense(8, activation="relu")(one_hot)  # auto-named: dense, dense_1... in this process
    return keras.Model(inputs, keras.layers.Dense(spec.outputs, name="logits")(hidden), name="ids_model")
