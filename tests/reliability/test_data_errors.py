"""A user's broken data is a ConfigError before training: which file, what is wrong, how to fix it.

The checks themselves: `launcher.train.data_checks`.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.config import TINY, config

from launcher.config.errors import ConfigError
from launcher.train.registry import DATASETS

GOOD_X = np.random.default_rng(0).normal(size=(40, 6)).astype("float32")
GOOD_Y = np.arange(40) % 4


def _load(path, *overrides):
    return DATASETS.get("npz").load(config("dataset=npz", f"dataset.path={path}", *overrides).dataset)


def _refusal(path, *overrides) -> ConfigError:
    with pytest.raises(ConfigError) as refused:
        _load(path, *overrides)
    assert str(path) in str(refused.value) and "fix:" in str(refused.value)
    return refused.value


def _nan_rows():
    x = GOOD_X.copy()
    x[[3, 17], 2] = np.nan
    x[20, 0] = np.inf
    return x


CASES = {
    # name: (x, y, extra overrides, key named, words in the message)
    "string labels": (GOOD_X, np.array(["cat", "dog"] * 20), [], "dataset.y_key", "<U3 labels such as 'cat'"),
    "fractional labels": (GOOD_X, np.linspace(0, 1, 40), [], "dataset.y_key", "regression targets?"),
    "one-hot labels": (GOOD_X, np.eye(4)[GOOD_Y], [], "dataset.y_key", "one-hot?"),
    "negative labels": (GOOD_X, GOOD_Y - 1, [], "dataset.y_key", "smallest is -1"),
    "labels out of range": (GOOD_X, GOOD_Y, ["dataset.num_classes=3"], "dataset.num_classes", "largest label"),
    "NaN and inf inputs": (_nan_rows(), GOOD_Y, [], "dataset.x_key", "3 example(s), e.g. index 3, 17, 20"),
    "1-D inputs": (GOOD_X[:, 0], GOOD_Y, [], "dataset.x_key", "got shape (40,)"),
    "lengths differ": (GOOD_X, GOOD_Y[:30], [], "dataset.path", "got 40 and 30"),
    "string inputs": (np.array([["a"]] * 40), GOOD_Y, [], "dataset.x_key", "numeric inputs"),
    "negative token ids": (np.full((40, 5), -2), GOOD_Y, [], "dataset.x_key", "token ids >= 0"),
    "empty file": (GOOD_X[:0], GOOD_Y[:0], [], "dataset.path", "at least 2 examples"),
    "empty training split": (
        GOOD_X[:3],
        GOOD_Y[:3],
        ["dataset.validation_split=0.9"],
        "dataset.validation_split",
        "the training split is empty",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_each_kind_of_bad_array_is_named(tmp_path, case):
    x, y, overrides, key, words = CASES[case]
    path = tmp_path / "data.npz"
    np.savez(path, x=x, y=y)
    error = _refusal(path, *overrides)
    assert key in {v.key for v in error.violations}, str(error)
    assert words in str(error), str(error)


def test_every_problem_of_a_file_is_reported_at_once(tmp_path):
    path = tmp_path / "data.npz"
    np.savez(path, x=_nan_rows(), y=np.array(["cat", "dog"] * 20))
    assert {v.key for v in _refusal(path).violations} == {"dataset.x_key", "dataset.y_key"}


def test_integral_float_labels_are_class_ids(tmp_path):
    path = tmp_path / "data.npz"
    np.savez(path, x=GOOD_X, y=GOOD_Y.astype("float64"))
    source = _load(path)
    assert source.num_classes == 4 and source.num_train + source.num_val == 40


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", "a readable .npz file"),
        (b"PK\x03\x04 truncated zip", "a readable .npz file"),
        (None, "not an .npz archive"),  # a .npy saved under an .npz name
        ("pickle", "a readable .npz file"),  # object arrays: never unpickled
    ],
)
def test_unreadable_files_are_refused(tmp_path, content, words):
    path = tmp_path / "data.npz"
    if content is None:
        with open(path, "wb") as handle:
            np.save(handle, GOOD_X)
    elif content == "pickle":
        np.savez(path, x=np.array([{"a": 1}] * 40, dtype=object), y=GOOD_Y)
    else:
        path.write_bytes(content)
    assert words in str(_refusal(path))


def _png(path, size=4):
    import zlib

    raw = b"".join(b"\x00" + b"\x80" * (size * 3) for _ in range(size))

    def chunk(kind, data):
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    header = size.to_bytes(4, "big") * 2 + bytes([8, 2, 0, 0, 0])
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    )


def test_image_folder_names_empty_classes_and_broken_files(tmp_path):
    for name in ("cat", "dog", "owl"):
        (tmp_path / name).mkdir()
    for i in range(3):
        _png(tmp_path / "cat" / f"{i}.png")
    (tmp_path / "dog" / "bad.png").write_text("not an image")
    with pytest.raises(ConfigError) as refused:
        DATASETS.get("image_folder").load(config("dataset=image_folder", f"dataset.path={tmp_path}").dataset)
    message = str(refused.value)
    assert "empty: owl" in message
    assert "1 file(s)" in message and str(tmp_path / "dog" / "bad.png") in message


def test_the_rules_refuse_before_the_data_loads_then_the_data_problems_come_with_the_rest(cli_here, tmp_path):
    """The rules' refusals come before TensorFlow loads (issue 62, item 9: ~1 CPU-s, not ~7), saying the data is
    checked once they pass; then the data's problems come with every other problem the full pass finds."""
    path = tmp_path / "data.npz"
    np.savez(path, x=_nan_rows(), y=GOOD_Y)
    done = cli_here(*TINY, "dataset=npz", f"dataset.path={path}", "xla=maybe")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Invalid configuration (1 problem)" in done.stderr, done.stderr[-2000:]
    assert (
        "xla='maybe'" in done.stderr and "the data, the model and the tracking server are checked once" in done.stderr
    )
    done = cli_here(*TINY, "dataset=npz", f"dataset.path={path}", "xla=false", "tracking.uri=http://127.0.0.1:9")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Invalid configuration (2 problems)" in done.stderr, done.stderr[-2000:]
    assert "finite inputs" in done.stderr and "tracking.uri" in done.stderr
    assert "Traceback" not in done.stderr
