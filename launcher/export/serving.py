"""Exports a server or a device runs: a TensorFlow SavedModel whose `serving_default` takes the raw input and
returns the task's predictions, and a TFLite file converted from a float32 twin of the model (TFLite's builtin
kernels are float32) and checked against the SavedModel.

A model of one input array takes it as `inputs`; a model of named features (or a tuple of them) takes each as
its own input, named like the feature (or the model's input). A model of several heads answers each head's
served keys, `<head>_<key>` (kind_probabilities, kind_label, size_values).

Both are made from the exported `.keras` model loaded outside the strategy (one set of plain variables), so
they are the same whatever strategy, precision or XLA trained it. A model TFLite cannot convert is reported,
never a failed run: the training is done and its other exports stand.
"""

from __future__ import annotations

import re
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from launcher.config.exports import EXPORT_FORMATS, served_formats
from launcher.console import quiet_stderr
from launcher.files import written_aside
from launcher.train.preprocessing import Preprocessing

SIGNATURE = "serving_default"
INPUT_NAME = "inputs"


@dataclass
class ServingExports:
    """What was written (name -> path) and what could not be (name -> why), with TFLite's difference."""

    written: dict[str, Path] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


def input_spec(source):
    """The raw input one example at a time, any batch: token ids as int32, everything else float32."""
    import tensorflow as tf

    dtype = tf.int32 if source.kind == "tokens" else tf.float32
    return tf.TensorSpec([None, *source.input_shape], dtype, name=INPUT_NAME)


@dataclass(frozen=True)
class ServedInputs:
    """The served function's raw inputs by name, and how they become the model's input: the data's preprocessing
    (`launcher.train.preprocessing`), then one array (`inputs`), a dict of named features, or a tuple in the
    model's input order."""

    specs: dict  # name -> tf.TensorSpec of the raw input, in the model's order
    form: str  # one, dict or tuple
    preprocessing: Preprocessing | None = None

    @property
    def signature(self) -> list:
        """The endpoint's input signature: one spec, or one dict of specs (its keys the signature's input names)."""
        return [self.specs[INPUT_NAME]] if self.form == "one" else [self.specs]

    def model_input(self, given):
        """What the model takes, from the endpoint's argument (one tensor, or a dict by input name)."""
        if self.form == "tuple":  # as training passes a tuple of features: whole, under `inputs`
            features = tuple(given[name] for name in self.specs)
            if self.preprocessing is not None:
                features = self.preprocessing.prepare({INPUT_NAME: features})[INPUT_NAME]
            return list(features)
        named = {INPUT_NAME: given} if self.form == "one" else dict(given)
        if self.preprocessing is not None:
            named = self.preprocessing.prepare(named)
        return named[INPUT_NAME] if self.form == "one" else named

    def named(self, first) -> dict[str, np.ndarray]:
        """`first` (an array, a dict or a tuple of raw features, as `DataSource.first_raw` gives) by input name, in
        each input's dtype."""
        if self.form == "one":
            arrays = {INPUT_NAME: first}
        elif self.form == "dict":
            arrays = dict(first)
        else:
            arrays = dict(zip(self.specs, first, strict=True))
        return {name: np.asarray(arrays[name]).astype(spec.dtype.as_numpy_dtype) for name, spec in self.specs.items()}

    def example(self, source, count: int, signature: str = SIGNATURE) -> dict[str, np.ndarray]:
        """`count` raw examples for `signature`, by input name: what a client sends."""
        encoded = self.preprocessing.encoded_by_signature(signature) if self.preprocessing else None
        if encoded is not None:
            return {encoded.input: np.asarray(encoded.examples(count), dtype=object)}
        if self.preprocessing is not None and self.preprocessing.raw_examples is not None:
            return self.named(_unnamed(self.preprocessing.raw_examples(count), self.form))
        return self.named(source.first_raw(count))


def _unnamed(arrays: dict, form: str):
    return arrays[INPUT_NAME] if form == "one" else arrays


def served_inputs(source, model) -> ServedInputs:
    """One array: `inputs` as today. Named features: one input each, named like the feature; a tuple of features:
    named like the model's inputs. Integer features (ids) as int32, the others float32, unless the data's
    preprocessing takes another raw dtype (uint8 pixels)."""
    import tensorflow as tf

    preprocessing = getattr(source, "preprocessing", None)
    raw = preprocessing.raw if preprocessing is not None else {}
    first = source.first_raw(1)
    if not isinstance(first, dict | tuple | list):
        spec = input_spec(source)
        if preprocessing is not None:  # the raw features' shape and dtype, which a loader's preprocessing may change
            dtype = tf.as_dtype(raw[INPUT_NAME]) if INPUT_NAME in raw else _raw_dtype(first, spec.dtype)
            spec = tf.TensorSpec([None, *np.asarray(first).shape[1:]], dtype, name=INPUT_NAME)
        elif _raw_dtype(first, spec.dtype) == tf.string:  # raw text or string categories: served as strings
            spec = tf.TensorSpec(spec.shape, tf.string, name=INPUT_NAME)
        return ServedInputs({INPUT_NAME: spec}, "one", preprocessing)
    names = list(first) if isinstance(first, dict) else _input_names(model, len(first))
    arrays = first if isinstance(first, dict) else dict(zip(names, first, strict=True))
    specs = {}
    for name in names:
        array = np.asarray(arrays[name])
        dtype = (
            tf.as_dtype(raw[name])
            if name in raw
            else _raw_dtype(array, tf.int32 if array.dtype.kind in "iu" else tf.float32)
        )
        specs[name] = tf.TensorSpec([None, *array.shape[1:]], dtype, name=name)
    return ServedInputs(specs, "dict" if isinstance(first, dict) else "tuple", preprocessing)


def _raw_dtype(array, otherwise):
    """Strings stay strings (raw text or categories a preprocess looks up); else `otherwise`."""
    import tensorflow as tf

    array = np.asarray(array)
    text = array.dtype.kind in "US" or (
        array.dtype.kind == "O" and array.size > 0 and isinstance(array.flat[0], str | bytes)
    )
    return tf.string if text else otherwise


def _input_names(model, count: int) -> list[str]:
    """The model's input names for a tuple of features (input_<i> where they are missing or repeat)."""
    names = [t._keras_history[0].name for t in getattr(model, "inputs", None) or []]
    return names if len(set(names)) == count == len(names) else [f"input_{i}" for i in range(count)]


def export_saved_model(model, task, inputs: ServedInputs, path: Path) -> None:
    """`path` as a SavedModel: `serve` (= serving_default) maps the named raw inputs to the task's served outputs;
    each encoded way in the data has (serving_images: image files' bytes, serving_examples: tf.Examples) decodes
    into those raw inputs first, then takes the same path."""
    import keras
    import tensorflow as tf

    if path.exists():  # a resumed run exports again
        shutil.rmtree(path)
    archive = keras.export.ExportArchive()
    archive.track(model)
    for state in inputs.preprocessing.tracked if inputs.preprocessing else ():
        archive.track(state)  # a loader's preprocess layer: its lookup table is part of the served function

    def served(given):
        return task.served(model(inputs.model_input(given), training=False))

    archive.add_endpoint(name="serve", fn=served, input_signature=inputs.signature)

    def decoding(encoded):
        def decoded(strings):
            named = encoded.decode(strings)
            return served(named[INPUT_NAME] if inputs.form == "one" else named)

        return decoded

    for encoded in inputs.preprocessing.encoded if inputs.preprocessing else ():
        archive.add_endpoint(
            name=encoded.signature,
            fn=decoding(encoded),
            input_signature=[tf.TensorSpec([None], tf.string, name=encoded.input)],
        )
    archive.write_out(str(path), verbose=False)


def export_tflite(model, task, inputs: ServedInputs, path: Path, example: dict, reference: Path) -> str:
    """model.tflite from a float32 twin of `model` (TFLite's builtin kernels are float32; a mixed policy's float16
    matmuls have none); returns how it compares with the SavedModel at `reference` on `example` (input name ->
    array)."""
    import tensorflow as tf

    staging = path.parent / "saved_model.float32"
    try:
        export_saved_model(float32_twin(model), task, inputs, staging)
        try:
            with quiet_stderr():  # the converter's C++ notes on fd 2 (replayed if it fails)
                content = tf.lite.TFLiteConverter.from_saved_model(str(staging), signature_keys=[SIGNATURE]).convert()
        except Exception as err:  # the converter's own error types: name the ops it has no builtin for
            raise TfliteUnsupported(_unsupported(err)) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    path.write_bytes(content)
    with warnings.catch_warnings(), quiet_stderr():  # the notice that LiteRT will replace it; "XNNPACK delegate"
        warnings.simplefilter("ignore")
        runner = tf.lite.Interpreter(model_content=content).get_signature_runner(SIGNATURE)
        got = runner(**example)
    want = tf.saved_model.load(str(reference)).signatures[SIGNATURE](
        **{name: tf.constant(array) for name, array in example.items()}
    )
    return compare(got, {key: value.numpy() for key, value in want.items()}, len(next(iter(example.values()))))


def compare(got: dict, want: dict, examples: int) -> str:
    """Float outputs by their largest difference, integer ones (labels) by how many agree."""
    said = []
    for key in sorted(want):
        mine, theirs = np.asarray(got[key]), np.asarray(want[key])
        if theirs.dtype.kind == "f":
            said.append(f"{key} max |difference| {float(np.max(np.abs(mine.astype('float64') - theirs))):.2g}")
        else:
            said.append(f"{key} {float(np.mean(mine == theirs)):.0%} equal")
    return f"TFLite vs SavedModel on {examples} examples: " + ", ".join(said)


class TfliteUnsupported(Exception):
    """The model uses operations TFLite's builtin kernels do not have."""


def _unsupported(err: Exception) -> str:
    ops = sorted(set(re.findall(r"'tf\.(\w+)' op is neither", str(err))))
    if ops:
        return (
            f"TFLite's builtin ops have no {', '.join(ops)} (Select TF ops would need the Flex delegate at run "
            "time); the SavedModel serves this model"
        )
    return " ".join(str(err).strip().splitlines()[:2])[:300]


def float32_twin(model):
    """The same network and weights under the float32 policy (a model trained under mixed_float16 or
    mixed_bfloat16 included); the model itself when it has no config to rebuild from (subclassed)."""

    try:
        config = model.get_config()
    except NotImplementedError:
        return model
    twin = model.__class__.from_config(_float32_policies(config))
    twin.set_weights(model.get_weights())
    return twin


def _float32_policies(node):
    if isinstance(node, dict):
        if node.get("class_name") in ("DTypePolicy", "FloatDTypePolicy"):
            return {**node, "config": {**node.get("config", {}), "name": "float32"}}
        return {key: _float32_policies(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_float32_policies(value) for value in node]
    return node


def export_serving(model, task, source, run_dir: Path, formats: list[str]) -> ServingExports:
    """The SavedModel and/or TFLite exports `formats` asks for, into the run dir (where the export format table
    says each is written)."""
    done = ServingExports()
    if not served_formats(formats):
        return done
    saved = run_dir / EXPORT_FORMATS["saved_model"].written
    try:
        inputs = served_inputs(source, model)
        written_aside(saved, lambda aside: export_saved_model(model, task, inputs, aside))
    except Exception as err:  # the training is done: say why this export is missing, keep the others
        done.failed["saved_model"] = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
        return done
    if "saved_model" in formats:
        done.written["saved_model"] = saved
    if "tflite" in formats:
        try:
            example = inputs.example(source, 8)
            path = run_dir / EXPORT_FORMATS["tflite"].written
            notes = []
            written_aside(path, lambda aside: notes.append(export_tflite(model, task, inputs, aside, example, saved)))
            done.notes["tflite"], done.written["tflite"] = notes[0], path
        except TfliteUnsupported as err:
            done.failed["tflite"] = str(err)
        except Exception as err:  # the training is done: say why this export is missing, keep the others
            done.failed["tflite"] = f"{type(err).__name__}: {' '.join(str(err).strip().splitlines()[:2])[:300]}"
    if "saved_model" not in formats:
        shutil.rmtree(saved, ignore_errors=True)  # only the way to TFLite
    return done
