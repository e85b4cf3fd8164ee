"""`mode=predict`: the served answers written a chunk at a time, beside each example's id (a split's predictions
too, with its label as `target`: one answer format, one column naming, for every path).

Why a module: the output must not grow with the input in memory, and must not look finished when it is not.
Parquet (`.parquet`, `.pq`; the default for a batch input) and CSV are written a chunk at a time; `.npz` has no way
to append, so its arrays are gathered in memory and written at the end (for inputs that fit in memory). A file is
written under a `.partial` name and renamed when the last chunk is in: a failed prediction leaves no predictions
file. Columns: the id (`row`, the `eval.ids` column, `file` or `record`), then each served output by its key (a
vector answer is a list column in Parquet, `<key>_0..<key>_{k-1}` in CSV; text answers such as class names as
strings).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from launcher.config.errors import ConfigError, Violation

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".npz": "npz"}
BATCH_DEFAULT = "predictions.parquet"  # eval.output for a batch input when eval.output is left at its default


def output_problems(output: str) -> list[Violation]:
    """eval.output's extension names a format a batch input is written in."""
    if Path(output).suffix.lower() in FORMATS:
        return []
    return [
        Violation(
            "eval.output",
            output,
            f"a file name ending in {', '.join(FORMATS)} (the format of the predictions)",
            f"eval.output={Path(output).stem or 'predictions'}.parquet",
        )
    ]


def arrow_column(values: np.ndarray) -> pa.Array:
    """One served output of a chunk as a column: one value an example, or (nested) lists of the trailing
    dimensions; bytes (tf.string) as UTF-8 strings."""
    values = np.asarray(values)
    if values.dtype.kind in "OS":
        values = np.vectorize(_text, otypes=[object])(values) if values.size else values.astype(object)
    column = pa.array(values.reshape(-1), type=pa.string() if values.dtype.kind in "OS" else None)
    for width in reversed(values.shape[1:]):
        column = pa.FixedSizeListArray.from_arrays(column, width)
    return column


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def flat_columns(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs as one value per column: a vector answer as `<key>_0..<key>_{k-1}` (row-major)."""
    flat = {}
    for key, values in outputs.items():
        values = np.asarray(values)
        if values.ndim == 1:
            flat[key] = values
            continue
        matrix = values.reshape(len(values), -1)
        flat.update({f"{key}_{j}": matrix[:, j] for j in range(matrix.shape[1])})
    return flat


class Writer:
    """Writes chunks of (ids, outputs by key) to `path` through `<path>.partial`; `close` renames it, `abort`
    removes it."""

    def __init__(self, path: Path, id_name: str):
        self.path, self.id_name = Path(path), id_name
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.format = FORMATS[self.path.suffix.lower()]
        self.rows = 0
        self._writer = None
        self._gathered: list[tuple[pa.Array, dict]] = []

    def write(self, ids: pa.Array, outputs: dict[str, np.ndarray]) -> None:
        if self.id_name in outputs:
            raise ConfigError.single(
                "eval.ids",
                self.id_name,
                f"an id column named unlike the model's answers {sorted(outputs)} (it would be overwritten)",
                "name the id column otherwise in the input (eval.ids=<that column>)",
            )
        if self.format == "npz":
            self._gathered.append((ids, {key: np.asarray(v) for key, v in outputs.items()}))
        else:
            columns = outputs if self.format == "parquet" else flat_columns(outputs)
            table = pa.table({self.id_name: ids, **{key: arrow_column(v) for key, v in columns.items()}})
            if self._writer is None:
                self.partial.parent.mkdir(parents=True, exist_ok=True)
                kind = pq.ParquetWriter if self.format == "parquet" else pcsv.CSVWriter
                self._writer = kind(str(self.partial), table.schema)
            self._writer.write_table(table.cast(self._writer.schema) if self.format == "parquet" else table)
        self.rows += len(ids)

    def close(self) -> Path:
        if self.format == "npz":
            self._write_npz()
        elif self._writer is not None:
            self._writer.close()
        self.partial.replace(self.path)
        return self.path

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self.partial.unlink(missing_ok=True)

    def _write_npz(self) -> None:
        ids = pa.chunked_array([chunk for chunk, _ in self._gathered]) if self._gathered else pa.array([])
        arrays = {self.id_name: _numpy(ids.to_numpy())}
        for key in self._gathered[0][1] if self._gathered else ():
            arrays[key] = _numpy(np.concatenate([outputs[key] for _, outputs in self._gathered]))
        # As np.savez writes it, which cannot take an array named `file` (its own argument) nor keep the .partial name.
        with zipfile.ZipFile(self.partial, "w", allowZip64=True) as archive:
            for name, values in arrays.items():
                with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asanyarray(values), allow_pickle=False)


def _numpy(values: np.ndarray) -> np.ndarray:
    """Text (bytes or objects) as a numpy unicode array: np.load reads it without pickle."""
    if values.dtype.kind in "OS":
        return np.vectorize(_text, otypes=[object])(values).astype(str) if values.size else values.astype(str)
    return values
