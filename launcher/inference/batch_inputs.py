"""`mode=predict eval.input=<file>`: a CSV or Parquet table of raw features read in bounded chunks, each chunk the
served function's named inputs.

Why here and not in the data pipeline: a batch of predictions is what a client sends the SavedModel, not what
training read. The input names, shapes and dtypes come from the signature itself (`Spec.of`), so the table is
checked against what the served function takes, never against what training happened to load; and every way a
table can be wrong (a missing column, text where numbers go, fractions for integer ids, an empty cell) is a
`ConfigError` naming the column before a wrong answer is written. A feature of shape [k] is `k` columns
`<name>_0..<name>_{k-1}` (row-major for more dimensions) or, in Parquet, one column of lists; an input of one value
per example is one column named like it. Images and TFRecord files are read by `launcher.inference.batch_files`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from launcher.config.errors import ConfigError, Violation
from launcher.train.preprocessing import IMAGE_EXTENSIONS

CHUNK_ROWS = 4096  # examples per call of the served function: the chunk a reader yields and a writer writes
CSV_BLOCK_BYTES = 1 << 20  # bytes of CSV text pyarrow parses at once (it reads some 16-32 blocks ahead)
TABLES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
TFRECORD_EXTENSIONS = (".tfrecord", ".tfrecords", ".tfrec")
KINDS = "a .csv or .parquet table of features, a folder of images (.jpg, .png, ...) or of .tfrecord files"


@dataclass(frozen=True)
class Spec:
    """One input of the served function, per example: its name, its shape without the batch (None: any) and its
    numpy dtype (object for strings)."""

    name: str
    shape: tuple
    dtype: np.dtype

    @classmethod
    def of(cls, name: str, tensor_spec) -> Spec:
        dims = tensor_spec.shape.as_list()[1:]
        dtype = np.dtype(object) if tensor_spec.dtype.name == "string" else np.dtype(tensor_spec.dtype.as_numpy_dtype)
        return cls(name, tuple(dims), dtype)

    @property
    def size(self) -> int | None:
        """Values per example (None when a dimension is not fixed)."""
        return None if None in self.shape else math.prod(self.shape)

    def describe(self) -> str:
        return f"{self.dtype.name if self.dtype != object else 'string'} {list(self.shape)}"


def signature_specs(signature) -> dict[str, Spec]:
    """A loaded SavedModel signature's inputs by name, as it declares them (`structured_input_signature`)."""
    args, kwargs = signature.structured_input_signature
    named = dict(kwargs)
    named.update({spec.name: spec for spec in args})
    return {name: Spec.of(name, spec) for name, spec in named.items()}


@dataclass(frozen=True)
class Chunk:
    """At most CHUNK_ROWS examples: their ids (a pyarrow array), the served function's inputs by name, how far the
    input's progress moved (its unit: the reader's) and the file they came from when the input has several."""

    ids: pa.Array
    inputs: dict[str, np.ndarray]
    advance: int = 0
    origin: str = ""


@dataclass
class BatchInput:
    """An input opened for one signature: its chunks, the id column's name and how progress is counted."""

    path: Path
    kind: str  # csv, parquet, images, tfrecord
    signature: str
    id_name: str
    chunks: Iterator[Chunk]
    total: int | None = None  # progress units in all (None: not known before the end)
    unit: str = "rows"
    notes: list[str] = field(default_factory=list)


def bad_input(path, expected: str, fix: str) -> ConfigError:
    return ConfigError([Violation("eval.input", str(path), expected, fix)])


def input_kind(path: Path) -> str | None:
    """csv, parquet, images or tfrecord, by the file's extension or what the folder holds; None when neither."""
    if path.is_dir():
        tfrecords = False
        for found in path.rglob("*"):
            suffix = found.suffix.lower()
            if suffix in IMAGE_EXTENSIONS and found.is_file():
                return "images"
            tfrecords = tfrecords or suffix in TFRECORD_EXTENSIONS or found.name.lower().endswith(".tfrecord.gz")
        return "tfrecord" if tfrecords else None
    name = path.name.lower()
    for extension in (".gz", ".bz2", ".zst", ".lz4"):
        name = name.removesuffix(extension)  # pyarrow decompresses a CSV by its extension; TFRecord may be GZIP
    suffix = Path(name).suffix
    if suffix in TABLES:
        return TABLES[suffix]
    return "tfrecord" if suffix in TFRECORD_EXTENSIONS else None


def input_problems(given: str, path: Path, ids: str) -> list[Violation]:
    """What is wrong with eval.input / eval.ids before anything loads: no such path, a kind it cannot read, or an
    id column for an input that has no columns."""
    if not path.exists():
        return [Violation("eval.input", given, f"{KINDS} (no such file or folder: {path})", "eval.input=<a path>")]
    kind = input_kind(path)
    if kind is None:
        held = sorted({p.suffix or p.name for p in path.iterdir()})[:8] if path.is_dir() else [path.suffix]
        return [
            Violation(
                "eval.input",
                given,
                f"{KINDS} (it holds {', '.join(held) or 'nothing'})",
                "convert the features to .csv or .parquet, or point at the folder of images or TFRecord files",
            )
        ]
    if ids and kind not in ("csv", "parquet"):
        return [
            Violation(
                "eval.ids",
                ids,
                f"empty for {kind} (a column of a .csv or .parquet table; {kind} are named by "
                f"{'file' if kind == 'images' else 'record index'})",
                "drop eval.ids",
            )
        ]
    return []


# ------------------------------------------------------------------------------------------------ tables


@dataclass(frozen=True)
class Layout:
    """Where one input's values are in a table: one column (of values, or of lists) or one column per value."""

    spec: Spec
    columns: tuple[str, ...]
    lists: bool = False  # the one column holds lists of values (Parquet)


def table_layout(specs: dict[str, Spec], schema: pa.Schema, path, kind: str) -> dict[str, Layout]:
    """Each input's columns in `schema`, every problem at once: missing columns (named, with those present), or
    columns whose type cannot hold the input's values."""
    present = list(schema.names)
    layouts, missing, wrong = {}, [], []
    for name, spec in specs.items():
        split = [f"{name}_{i}" for i in range(spec.size or 0)] if spec.size != 1 else []
        lists = name in present and _is_list(schema.field(name).type)
        if name in present and (lists or spec.size == 1 or spec.shape == ()):
            layouts[name] = Layout(spec, (name,), lists)
        elif split and all(column in present for column in split):
            layouts[name] = Layout(spec, tuple(split))
        elif name in present:
            wrong.append((name, "one value a row", f"input {name!r} takes {spec.describe()}"))
            continue
        else:
            missing.append((spec, [c for c in split if c not in present] or [name]))
            continue
        for column in layouts[name].columns:
            why = _type_problem(spec, schema.field(column).type, layouts[name].lists)
            if why:
                wrong.append((column, str(schema.field(column).type), why))
    problems = []
    if missing:
        needs = "; ".join(_needs(spec, kind) for spec, _ in missing)
        absent = [c for _, columns in missing for c in columns]
        problems.append(
            Violation(
                "eval.input",
                str(path),
                f"a table with a column for every input the model takes ({needs}); missing: {_names(absent)}; "
                f"present: {_names(present)}",
                "add the missing columns (named as above), or rename the table's feature columns to them",
            )
        )
    if wrong:
        problems.append(
            Violation(
                "eval.input",
                str(path),
                "columns of the input's dtype ("
                + ", ".join(f"{s.name}: {s.describe()}" for s in specs.values())
                + "); "
                + "; ".join(_grouped(wrong)),
                "write those columns as numbers (integers for integer inputs)",
            )
        )
    if problems:
        raise ConfigError(problems)
    return layouts


def _grouped(wrong: list[tuple[str, str, str]]) -> list[str]:
    """(column, what it holds, why) as one line per (what, why): `columns x_0..x_63 (64) are string: ...`."""
    by_reason: dict[tuple[str, str], list[str]] = {}
    for column, held, why in wrong:
        by_reason.setdefault((held, why), []).append(column)
    return [
        f"column{'s' if len(columns) > 1 else ''} {_names(columns) if len(columns) > 1 else repr(columns[0])} "
        f"{'are' if len(columns) > 1 else 'is'} {held}: {why}"
        for (held, why), columns in by_reason.items()
    ]


def _needs(spec: Spec, kind: str) -> str:
    if spec.shape == () or spec.size == 1:
        return f"{spec.name!r} ({spec.describe()})"
    if spec.size is None:
        return f"{spec.name!r}: a column of lists ({spec.describe()})"
    split = f"{spec.name}_0..{spec.name}_{spec.size - 1}"
    order = f", row-major for shape {list(spec.shape)}" if len(spec.shape) > 1 else ""
    lists = f", or one column {spec.name!r} of {spec.size}-value lists" if kind == "parquet" else ""
    return f"{spec.name!r}: {split} ({spec.size} {spec.dtype.name} values a row{order}{lists})"


def _names(names: list[str], most: int = 10) -> str:
    """Names for a message, long runs shortened: `inputs_5..inputs_63 (59)`; past `most`, a count."""
    runs, index = [], 0
    while index < len(names):
        match = re.fullmatch(r"(.*_)(\d+)", names[index])
        end = index
        while (
            match
            and end + 1 < len(names)
            and names[end + 1] == f"{match.group(1)}{int(match.group(2)) + end - index + 1}"
        ):
            end += 1
        if end - index < 2:  # two in a row are named as they are
            end = index
        runs.append(names[index] if end == index else f"{names[index]}..{names[end]} ({end - index + 1})")
        index = end + 1
    shown = ", ".join(runs[:most])
    return shown + (f", ... ({len(names)} columns in all)" if len(runs) > most else "") if runs else "none"


def _is_list(dtype: pa.DataType) -> bool:
    return pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_fixed_size_list(dtype)


def _type_problem(spec: Spec, dtype: pa.DataType, lists: bool) -> str | None:
    while lists and _is_list(dtype):
        dtype = dtype.value_type
    if spec.dtype == object:
        text = pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_binary(dtype)
        return None if text else f"input {spec.name!r} takes strings"
    if pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_null(dtype):
        return None  # whole numbers as floats are taken for integer inputs (fractions, empty cells refused per value)
    return f"input {spec.name!r} takes {spec.dtype.name} numbers"


def column_values(layout: Layout, batch: pa.RecordBatch) -> np.ndarray:
    """One input's values of a record batch, as [rows, *shape] in its dtype; a value it cannot take (empty, a
    fraction for an integer input, out of the dtype's range) is a `BadValue` at its row."""
    spec, rows = layout.spec, batch.num_rows
    if layout.lists:
        name, values, dims = layout.columns[0], batch.column(layout.columns[0]), []
        while _is_list(values.type):
            _null_check(values, name, math.prod(dims))
            lengths = pc.list_value_length(values).to_numpy(zero_copy_only=False)
            if len(lengths) and (lengths != lengths[0]).any():
                at = int(np.argmax(lengths != lengths[0]))
                raise BadValue(name, at // math.prod(dims), f"lists of one length ({list(spec.shape)})")
            dims.append(int(lengths[0]) if len(lengths) else 0)
            values = pc.list_flatten(values)
        flat = _numbers(values, spec, name, per_row=max(1, math.prod(dims)))
        if rows and spec.size is not None and math.prod(dims) != spec.size:
            raise BadValue(name, 0, f"lists of {spec.size} values a row ({math.prod(dims)} here)")
        return flat.reshape(rows, *(spec.shape if spec.size is not None else dims))
    arrays = [_numbers(batch.column(name), spec, name) for name in layout.columns]
    stacked = arrays[0] if len(arrays) == 1 else np.stack(arrays, axis=1)
    return stacked.reshape(rows, *spec.shape)


class BadValue(Exception):
    """A value an input cannot take, at a row of a chunk (the reader names its file and id)."""

    def __init__(self, column: str, at: int, expected: str):
        super().__init__(expected)
        self.column, self.at, self.expected = column, at, expected


def _inputs(layouts: dict[str, Layout], batch: pa.RecordBatch, ids: pa.Array, path, id_name: str) -> dict:
    """Every input's values of a record batch; a value one cannot take is a ConfigError naming the column and row."""
    try:
        return {name: column_values(layout, batch) for name, layout in layouts.items()}
    except BadValue as bad:
        where = f"column {bad.column!r} at {id_name} {ids[bad.at].as_py()}"
        raise bad_input(path, f"{where}: {bad.expected}", "fix that value, or drop the row") from None


def _null_check(values: pa.Array, column: str, per_row: int = 1) -> None:
    if values.null_count:
        at = int(np.argmax(values.is_null().to_numpy(zero_copy_only=False))) // per_row
        raise BadValue(column, at, "a value in every row (this one is empty)")


def _numbers(values: pa.Array, spec: Spec, column: str, per_row: int = 1) -> np.ndarray:
    _null_check(values, column, per_row)
    if spec.dtype == object:
        return np.asarray(values.to_pylist(), dtype=object)
    given = values.to_numpy(zero_copy_only=False)
    if spec.dtype.kind in "iu":
        info = np.iinfo(spec.dtype)
        bad = (
            (given != np.round(given)) | (given < info.min) | (given > info.max)
            if given.dtype.kind == "f"
            else ((given < info.min) | (given > info.max))
        )
        if bad.any():
            at = int(np.argmax(bad))
            raise BadValue(
                column,
                at // per_row,
                f"whole numbers in {info.min}..{info.max} ({spec.dtype.name}); it holds {given[at].item()!r}",
            )
    return given.astype(spec.dtype, copy=False)


def first_line(error: Exception) -> str:
    """An error's first line, without TensorFlow's `{{function_node ...}}` and `[Op:...]` wrapping."""
    text = str(getattr(error, "message", None) or error).strip().splitlines()
    line = re.sub(r"^\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]$", "", text[0]) if text else ""
    return line[:300] or type(error).__name__


def _ids_of(batch: pa.RecordBatch, ids_column: str, start: int) -> pa.Array:
    if ids_column:
        return batch.column(ids_column)
    return pa.array(np.arange(start, start + batch.num_rows, dtype=np.int64))


def _check_ids(ids_column: str, schema: pa.Schema, path) -> None:
    if ids_column and ids_column not in schema.names:
        raise ConfigError(
            [
                Violation(
                    "eval.ids",
                    ids_column,
                    f"a column of {path} ({_names(list(schema.names))}), or empty for the row number",
                    "eval.ids=<one of those columns>, or drop eval.ids",
                )
            ]
        )


def _table_input(path, kind: str, ids_column: str, chunks, total, unit) -> BatchInput:
    return BatchInput(Path(path), kind, "serving_default", ids_column or "row", chunks, total, unit)


def open_parquet(path: Path, specs: dict[str, Spec], ids_column: str = "", rows: int = CHUNK_ROWS) -> BatchInput:
    """A Parquet file read `rows` at a time, only the columns the inputs (and ids) need."""
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise bad_input(path, f"a Parquet file ({first_line(err)})", "write the table with a Parquet writer") from None
    schema = parquet.schema_arrow
    _check_ids(ids_column, schema, path)
    layouts = table_layout(specs, schema, path, "parquet")

    def chunks() -> Iterator[Chunk]:
        start = 0
        for batch in parquet.iter_batches(batch_size=rows, columns=_wanted(ids_column, layouts)):
            ids = _ids_of(batch, ids_column, start)
            yield Chunk(ids, _inputs(layouts, batch, ids, path, ids_column or "row"), batch.num_rows)
            start += batch.num_rows

    return _table_input(path, "parquet", ids_column, chunks(), parquet.metadata.num_rows, "rows")


CODECS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}


def open_csv(path: Path, specs: dict[str, Spec], ids_column: str = "", rows: int = CHUNK_ROWS) -> BatchInput:
    """A CSV file (compressed by its extension: .gz, .bz2, .zst, .lz4) parsed CSV_BLOCK_BYTES at a time by pyarrow,
    only the columns the inputs (and ids) need, each feature column as numbers of its input's kind; progress in
    bytes of the file."""
    read = pcsv.ReadOptions(block_size=CSV_BLOCK_BYTES)
    codec = CODECS.get(path.suffix.lower())

    def stream(raw):
        return pa.CompressedInputStream(raw, codec) if codec else raw

    try:
        with pa.OSFile(str(path)) as raw, pcsv.open_csv(stream(raw), read_options=read) as probe:
            schema = probe.schema
    except (pa.ArrowInvalid, OSError) as err:
        raise bad_input(path, f"a CSV file with a header row ({first_line(err)})", "check the file") from None
    _check_ids(ids_column, schema, path)
    layouts = table_layout(specs, schema, path, "csv")
    types = {
        column: pa.int64() if layout.spec.dtype.kind in "iu" else pa.float64()
        for layout in layouts.values()
        if layout.spec.dtype != object
        for column in layout.columns
    }
    if ids_column:
        types[ids_column] = schema.field(ids_column).type  # as the first block has it, kept for every block
    convert = pcsv.ConvertOptions(column_types=types, include_columns=_wanted(ids_column, layouts))

    def chunks() -> Iterator[Chunk]:
        start, done = 0, 0
        with pa.OSFile(str(path)) as raw:
            try:
                with pcsv.open_csv(stream(raw), read_options=read, convert_options=convert) as reader:
                    for block in reader:
                        for offset in range(0, block.num_rows, rows):
                            batch = block.slice(offset, rows)
                            ids = _ids_of(batch, ids_column, start)
                            inputs = _inputs(layouts, batch, ids, path, ids_column or "row")
                            position = raw.tell()
                            yield Chunk(ids, inputs, max(0, position - done))
                            done, start = max(done, position), start + batch.num_rows
            except pa.ArrowInvalid as err:
                raise _csv_error(path, err, list(schema.names), layouts, start) from None

    return _table_input(path, "csv", ids_column, chunks(), path.stat().st_size, "B")


def _wanted(ids_column: str, layouts: dict[str, Layout]) -> list[str]:
    """The columns to read: the ids', then each input's, once each."""
    columns = [*([ids_column] if ids_column else []), *(c for layout in layouts.values() for c in layout.columns)]
    return list(dict.fromkeys(columns))


def _csv_error(path, err: Exception, names: list[str], layouts: dict[str, Layout], start: int) -> ConfigError:
    """pyarrow's conversion error (`In CSV column #3: ... invalid value 'abc'`) with the column's name and input."""
    text = first_line(err)
    match = re.search(r"column #(\d+).*?to (\w+): invalid value '(.*)'", text)
    if not match or int(match.group(1)) >= len(names):
        return bad_input(path, f"a CSV file pyarrow reads ({text}; after row {start})", "check the file near there")
    column = names[int(match.group(1))]
    spec = next((lay.spec for lay in layouts.values() if column in lay.columns), None)
    takes = f"input {spec.name!r} takes {spec.dtype.name}" if spec else f"the column is {match.group(2)}"
    return bad_input(
        path,
        f"numbers in column {column!r} ({takes}); it holds {match.group(3)!r} (a row after {start})",
        "fix that value, or drop the row",
    )
