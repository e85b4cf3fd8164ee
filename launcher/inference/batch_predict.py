"""`mode=predict eval.input=<file or folder>`: predictions at scale, from the run's SavedModel, in bounded memory.

Why the SavedModel and not the Keras model: it is the one function every artifact serves (TFLite is converted from
it, the MLflow model calls it), preprocessing inside; a batch of predictions that computed its answer another way
could differ from what a client is served. The training run's `saved_model` is used when it has one and the model
asked for is its final one; otherwise the model is exported the same way (`launcher.export.serving`) into this
run's dir first. The input's names, shapes and dtypes are read from the signature, never assumed.

The input is read a chunk at a time (`launcher.inference.batch_inputs` for tables, `launcher.inference.batch_files` for
images and TFRecord), each chunk answered by the signature and written at once (`launcher.inference.batch_outputs`),
so memory stays flat however large the input. A progress bar shows on a terminal (stderr a TTY) only.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tensorflow as tf

try:
    from tqdm import tqdm
except ImportError:  # a progress bar is a nicety: without tqdm, none
    tqdm = None

from launcher.config.errors import ConfigError, Violation
from launcher.export.serving import export_saved_model, served_inputs
from launcher.inference import batch_files, batch_inputs, batch_outputs
from launcher.inference.batch_inputs import BatchInput, Chunk, bad_input, first_line, signature_specs

SUMMARY = "batch.json"
DEFAULT_OUTPUT = "predictions.npz"  # EvalConfig.output's default: a batch input then writes BATCH_DEFAULT
FIXES = {
    "images": "remove or re-encode that file (JPEG, PNG, BMP or GIF)",
    "tfrecord": "check that record's features against the data the model trained on",
}


def input_path(given: str, launch_dir: Path) -> Path:
    """eval.input as a path: relative to where the command was run, as eval.model is."""
    path = Path(given).expanduser()
    return path if path.is_absolute() else launch_dir / path


def output_name(given: str) -> str:
    """eval.output for a batch input: its default (predictions.npz) becomes predictions.parquet."""
    return batch_outputs.BATCH_DEFAULT if given == DEFAULT_OUTPUT else given


def problems(eval_config, launch_dir: Path, mode: str) -> list:
    """Everything wrong with eval.input, eval.ids and eval.output that shows before a model loads."""
    given = str(eval_config.input)
    if mode != "predict":
        return [
            Violation(
                "eval.input",
                given,
                f"empty with mode={mode} (mode=predict reads eval.input; it holds no labels to score)",
                "mode=predict, or drop eval.input",
            )
        ]
    path = input_path(given, launch_dir)
    found = batch_inputs.input_problems(given, path, str(eval_config.ids))
    return found + batch_outputs.output_problems(output_name(str(eval_config.output)))


def saved_model(train_dir: Path, run_dir: Path, model: str, model_and_task: Callable, data) -> Path:
    """The SavedModel that answers: the training run's own when `model` is its final one and it exported one,
    else the one `export_saved_model` writes into the run dir from `model_and_task()` (the loaded model and its
    task) and the data source (the raw inputs' names and dtypes)."""
    trained = train_dir / "saved_model"
    if model == "final" and (trained / "saved_model.pb").is_file():
        return trained
    path = run_dir / "saved_model"
    keras_model, task = model_and_task()
    export_saved_model(keras_model, task, served_inputs(data, keras_model), path)
    return path


def open_input(path: Path, signatures, ids_column: str) -> BatchInput:
    """The input opened for the signature that takes it (tables: serving_default; images: serving_images, else
    serving_default; TFRecord: serving_examples)."""
    specs = {name: signature_specs(signature) for name, signature in signatures.items()}
    kind = batch_inputs.input_kind(path)
    if kind == "csv":
        return batch_inputs.open_csv(path, specs["serving_default"], ids_column)
    if kind == "parquet":
        return batch_inputs.open_parquet(path, specs["serving_default"], ids_column)
    if kind == "images":
        return batch_files.open_images(path, specs)
    return batch_files.open_tfrecord(path, specs)


def predict_input(
    eval_config, train_dir: Path, run_dir: Path, launch_dir: Path, model_and_task: Callable, data
) -> tuple[dict, list[Path]]:
    """Predict eval.input with the run's SavedModel into eval.output; returns the metrics and files to log."""
    started = time.perf_counter()
    path = input_path(str(eval_config.input), launch_dir)
    served = saved_model(train_dir, run_dir, str(eval_config.model), model_and_task, data)
    loaded = tf.saved_model.load(str(served))
    source = open_input(path, loaded.signatures, str(eval_config.ids))
    output = run_dir / output_name(str(eval_config.output))
    print(
        f"  {source.kind} {path} -> {source.signature} of {served} -> {output.name}"
        + "".join(f"\n  {note}" for note in source.notes),
        flush=True,
    )
    examples = predict(loaded.signatures[source.signature], source, batch_outputs.Writer(output, source.id_name))
    seconds = time.perf_counter() - started
    print(f"  predictions of {examples} examples written to {output} ({seconds:.1f} s)", flush=True)
    summary = run_dir / SUMMARY
    summary.write_text(
        json.dumps(
            {
                "input": str(path),
                "kind": source.kind,
                "saved_model": str(served),
                "signature": source.signature,
                "output": str(output),
                "id": source.id_name,
                "examples": examples,
                "seconds": round(seconds, 3),
            },
            indent=2,
        )
        + "\n"
    )
    return {"input_examples": float(examples), "input_seconds": seconds}, [output, summary]


def predict(signature, source: BatchInput, writer: batch_outputs.Writer) -> int:
    """Every chunk of `source` through `signature`, written as it is answered; the output file exists only when
    every example was answered. Returns how many examples."""
    bar = _progress(source)
    try:
        for chunk in source.chunks:
            writer.write(chunk.ids, answer(signature, source, chunk))
            if bar is not None:
                bar.update(chunk.advance)
        if writer.rows == 0:
            raise bad_input(source.path, f"examples to predict ({source.kind} with none)", "give a non-empty input")
        writer.close()
    except BaseException:
        writer.abort()
        raise
    finally:
        if bar is not None:
            bar.close()
    return writer.rows


def answer(signature, source: BatchInput, chunk: Chunk) -> dict[str, np.ndarray]:
    """The signature's answer to one chunk; an example it refuses is a ConfigError naming it (its row, file or
    record), found by halving the chunk."""
    try:
        outputs = _call(signature, chunk.inputs)
    except tf.errors.InvalidArgumentError as err:
        raise _refused(signature, source, chunk, err) from None
    return outputs


def _call(signature, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {key: value.numpy() for key, value in signature(**{n: tf.constant(v) for n, v in inputs.items()}).items()}


def _refused(signature, source: BatchInput, chunk: Chunk, error: Exception) -> ConfigError:
    low, high = 0, len(chunk.ids)
    while high - low > 1:  # the first half that fails holds a refused example
        middle = (low + high) // 2
        try:
            _call(signature, {n: v[low:middle] for n, v in chunk.inputs.items()})
            low = middle
        except tf.errors.InvalidArgumentError as err:
            high, error = middle, err
    if source.kind == "images" and (found := batch_files.find_undecodable(source.path, [chunk.ids[low].as_py()])):
        return found
    where = f"{source.id_name} {chunk.ids[low].as_py()}" + (f" of {chunk.origin}" if chunk.origin else "")
    return bad_input(
        source.path,
        f"examples {source.signature} takes; it refused {where}: {first_line(error)}",
        FIXES.get(source.kind, "check that row's values against the model's inputs"),
    )


def _progress(source: BatchInput):
    """tqdm's bar on stderr when it is a terminal (never in a log file or a test); None otherwise."""
    if tqdm is None or not sys.stderr.isatty():
        return None
    scale = source.unit == "B"
    return tqdm(total=source.total, unit=source.unit, unit_scale=scale, desc="predict", file=sys.stderr)
