"""The MLflow model's code: the run's SavedModel, served through one of its signatures, as an MLflow pyfunc.

MLflow copies this file into the model ("models from code") and runs it wherever the model is loaded, so it
imports TensorFlow, NumPy and MLflow, never the launcher. `predict` is the SavedModel's signature itself, so
`mlflow models serve`, `mlflow.pyfunc.load_model` and the SavedModel give one answer; what it adds is checking
the request (names, shapes, dtypes, images that decode) so a bad one is an HTTP 400 that says what is wrong,
never a silent wrong answer. An input of a fixed shape is taken nested ([n, 8, 8, 1]) or each example flat, as a
CSV row holds it (a list [n, 64], or a table's columns `inputs_0..inputs_63`), reshaped row-major as `mode=predict`
reads a CSV.

`launcher.export.mlflow_model` writes the MLflow model around this file.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile

import numpy as np
from mlflow.exceptions import MlflowException
from mlflow.models import set_model
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.pyfunc import PythonModel

ARTIFACT = "saved_model"  # the SavedModel's key among the MLflow model's artifacts
SIGNATURE_KEY = "signature"  # the model config's key naming the SavedModel signature served


# TensorFlow's start-up lines (CUDA drivers not found, cuInit, CPU instructions, oneDNN) that a person serving the
# model cannot act on; whoever wants them sets TF_CPP_MIN_LOG_LEVEL=0 before `mlflow models serve`.
QUIET_DEFAULTS = {"TF_CPP_MIN_LOG_LEVEL": "2", "ABSL_MIN_LOG_LEVEL": "2", "GRPC_VERBOSITY": "ERROR"}


@contextlib.contextmanager
def _quiet_tensorflow_start():
    """TensorFlow imported and the SavedModel loaded with their C++ lines on fd 2 set aside (they bypass every log
    level), and written out after all if loading fails. TensorFlow reads its log levels once, at import: they are
    raised to errors only for the import and given back afterwards, so whoever loads the model keeps their own."""
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL") in ("0", "1"):  # the person asked for TensorFlow's info lines
        yield
        return
    added = {key: value for key, value in QUIET_DEFAULTS.items() if key not in os.environ}
    os.environ.update(added)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as aside:
            os.dup2(aside.fileno(), 2)
            try:
                yield
            except BaseException:
                os.dup2(saved, 2)
                aside.seek(0)
                sys.stderr.write(aside.read().decode(errors="replace"))
                raise
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)
        for key in added:
            os.environ.pop(key, None)


class ServedSavedModel(PythonModel):
    """A SavedModel signature as a pyfunc: named inputs in, the task's served outputs (a dict of arrays) out."""

    def load_context(self, context):
        with _quiet_tensorflow_start():
            import tensorflow as tf

            self._loaded = tf.saved_model.load(context.artifacts[ARTIFACT])
        name = (context.model_config or {}).get(SIGNATURE_KEY, "serving_default")
        self._function = self._loaded.signatures[name]
        self._specs = dict(self._function.structured_input_signature[1])

    # `np.ndarray` is one of the hints MLflow reads as "validate nothing from the hint" (requests are checked against
    # the MLflow signature, when it names inputs, and then by `_checked`); a dict of arrays or a DataFrame arrives
    # too. Without a hint MLflow warns at every save and load that one should be added, which no person can act on.
    def predict(self, context, model_input: np.ndarray, params=None):
        import tensorflow as tf

        given = {name: self._checked(name, value) for name, value in self._named(model_input).items()}
        try:
            answer = self._function(**{name: tf.constant(value) for name, value in given.items()})
        except tf.errors.InvalidArgumentError as err:  # an image that does not decode, a record that does not parse
            raise _bad_request(f"the model could not read the request: {err.message.splitlines()[0][:300]}") from None
        return {key: plain(value.numpy()) for key, value in answer.items()}

    def _named(self, model_input) -> dict:
        """The request by input name: a dict as is, one array for a model of one input, a DataFrame's columns."""
        if isinstance(model_input, dict):
            named = dict(model_input)
        elif hasattr(model_input, "columns"):  # a pandas DataFrame (column-based signatures, e.g. image bytes)
            named = {str(column): model_input[column].tolist() for column in model_input.columns}
            for name, spec in self._specs.items():  # an input given as a CSV's columns <name>_0..<name>_{k-1}
                flat = None if name in named else flat_columns(model_input, name, list(spec.shape)[1:])
                if flat is not None:
                    given = {f"{name}_{j}" for j in range(flat.shape[1])}
                    named = {k: v for k, v in named.items() if k not in given} | {name: flat}
        elif len(self._specs) == 1:
            named = {next(iter(self._specs)): model_input}
        else:
            raise _bad_request(f"the model takes named inputs {sorted(self._specs)}; send them as a JSON object")
        if set(named) != set(self._specs):
            missing, extra = sorted(set(self._specs) - set(named)), sorted(set(named) - set(self._specs))
            raise _bad_request(
                f"the model takes the inputs {sorted(self._specs)}; the request is missing {missing} and has {extra}"
            )
        return named

    def _checked(self, name: str, value) -> np.ndarray:
        """`value` as the input's dtype and shape, or a 400 naming the input, what came and what it takes."""
        spec = self._specs[name]
        wanted = spec.dtype.as_numpy_dtype
        text = spec.dtype.name == "string"  # raw text, categories, image bytes: any string, its shape checked below
        array = _encoded(value) if text else np.asarray(value)
        if not text and array.dtype.kind not in "biuf":
            raise _bad_request(f"input {name!r} holds {array.dtype} values; the model takes {spec.dtype.name} numbers")
        if np.dtype(wanted).kind in "iu":
            if array.dtype.kind == "f" and not np.all(np.mod(array, 1) == 0):
                raise _bad_request(f"input {name!r} holds fractions; the model takes {spec.dtype.name} ids")
            info = np.iinfo(wanted)
            if array.size and (array.min() < info.min or array.max() > info.max):
                raise _bad_request(
                    f"input {name!r} holds {array.min()}..{array.max()}; the model takes {spec.dtype.name} "
                    f"({info.min}..{info.max})"
                )
        return as_shape(name, array, list(spec.shape)).astype(wanted)


def as_shape(name: str, array: np.ndarray, shape: list) -> np.ndarray:
    """`array` in the input's `shape` ([None, 8, 8, 1]: n examples): as it is, or each example given flat (a CSV
    row: [n, 64]) reshaped row-major when the example's shape is fixed; else a 400 naming both forms."""
    if array.ndim == len(shape) and all(d in (None, got) for d, got in zip(shape, array.shape, strict=True)):
        return array
    example = shape[1:]
    size = int(np.prod(example)) if None not in example else None
    if size is not None and len(example) > 1 and array.ndim == 2 and array.shape[1] == size:
        return array.reshape(-1, *example)
    takes = ["n" if d is None else d for d in shape]
    flat = f", or each example flat: ['n', {size}] ({size} values, row-major)" if size and len(example) > 1 else ""
    raise _bad_request(
        f"input {name!r} has shape {list(array.shape)}; the model takes {takes} (n examples){flat}; send a list of "
        "examples, each in one of those shapes"
    )


def flat_columns(frame, name: str, example: list) -> np.ndarray | None:
    """A table's columns `<name>_0..<name>_{k-1}` (a CSV's flat row of one input, as `mode=predict` reads it) as
    [n, k]; None when the table has none of them."""
    size = int(np.prod(example)) if None not in example else None
    columns = [f"{name}_{j}" for j in range(size or 0)]
    if not columns or columns[0] not in frame.columns:
        return None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise _bad_request(
            f"input {name!r} as {size} columns {columns[0]}..{columns[-1]} (shape {example}, row-major); "
            f"the request lacks {missing[:5]}{' ...' if len(missing) > 5 else ''}"
        )
    return frame[columns].to_numpy()


def _encoded(value) -> np.ndarray:
    """Strings as the bytes TensorFlow takes, in their shape (one per example, or rows of them)."""
    array = np.asarray(value, dtype=object)
    if not array.size:
        return array
    return np.vectorize(lambda v: v if isinstance(v, bytes) else str(v).encode(), otypes=[object])(array)


def plain(value: np.ndarray) -> np.ndarray:
    """Strings (class names) as str, the rest as is: JSON has no bytes."""
    if value.dtype == object:
        return np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else v, otypes=[object])(value)
    return value


def _bad_request(message: str) -> MlflowException:
    return MlflowException(message, error_code=INVALID_PARAMETER_VALUE)


set_model(ServedSavedModel())
