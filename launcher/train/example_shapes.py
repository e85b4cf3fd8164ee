"""Examples of one shape that tf.data does not know statically (`keras.utils.timeseries_dataset_from_array(...,
batch_size=None)` yields windows of static shape `(None, 2)`): the shape read from the data, every example checked
against it, and the dataset given it with `tf.ensure_shape`, so the model, the checks and the exports see one
fixed shape. Examples that differ are refused, with the fix for what they are: batches (the last one smaller) or
examples of different lengths.
"""

from __future__ import annotations

from launcher.config.errors import Violation, raise_if_any


def with_fixed_shapes(splits: dict, key: str, value: str) -> dict:
    """Each unbatched tf.data split (name -> dataset) with its features' and targets' unknown dimensions read from
    its examples. Raises ConfigError naming the split, the feature or target and the examples, every problem at
    once; a split that is not `(x, y)` / `(x, y, w)` is returned as it is (the structure checks refuse it)."""
    found, fixed = [], {}
    for split, ds in splits.items():
        fixed[split], problems = _fixed(split, ds, key, value)
        found += problems
    raise_if_any(found)
    return fixed


def _parts(element) -> list:
    """The features and targets of one example (or its spec), flat, in tf.nest's order."""
    import tensorflow as tf

    return tf.nest.flatten(element[0]) + tf.nest.flatten(element[1])


def _names(spec) -> list[str]:
    """How a person names each of `_parts`: a feature by its key, x[i] or x; a target by its key, y[i] or y."""
    names = []
    for tree, single, what in ((spec[0], "x", "feature"), (spec[1], "y", "target")):
        if isinstance(tree, dict):
            names += [f"{what} {name!r}" for name in sorted(tree)]  # tf.nest's order
        elif isinstance(tree, tuple | list):
            names += [f"{what} '{single}[{i}]'" for i in range(len(tree))]
        else:
            names.append(f"{what} {single!r}")
    return names


def _fixed(split: str, ds, key: str, value: str) -> tuple:
    import tensorflow as tf

    spec = ds.element_spec
    if not (isinstance(spec, tuple) and len(spec) in (2, 3)):
        return ds, []
    specs, names = _parts(spec), _names(spec)
    unknown = [i for i, s in enumerate(specs) if s.shape.rank is not None and None in tuple(s.shape)]
    if not unknown:
        return ds, []
    first = next(iter(ds.take(1)), None)
    if first is None:
        return ds, []  # an empty split: the split checks refuse it
    shapes = [tuple(int(d) for d in part.shape) for part in _parts(first)]

    def differs(index, *element):
        parts = _parts(element)
        return index, tf.reduce_any([tf.reduce_any(tf.not_equal(tf.shape(parts[i]), shapes[i])) for i in unknown])

    odd = next(iter(ds.enumerate().map(lambda i, e: differs(i, *e)).filter(lambda _, bad: bad).take(1)), None)
    if odd is not None:
        index = int(odd[0])
        other = [tuple(int(d) for d in part.shape) for part in _parts(next(iter(ds.skip(index).take(1))))]
        last = index == int(ds.cardinality()) - 1
        return ds, [_differ(split, spec, names, unknown, shapes, other, index, last, key, value)]
    if _looks_batched(shapes):
        return ds, [_batched(split, names, specs, shapes, key, value)]
    known = tf.nest.pack_sequence_as(spec[:2], [tf.TensorShape(shape) for shape in shapes])
    rest = tuple(s.shape for s in spec[2:])

    def ensure(*element):
        fixed = tf.nest.map_structure(tf.ensure_shape, tuple(element[:2]), known)
        return (*fixed, *(tf.ensure_shape(w, shape) for w, shape in zip(element[2:], rest, strict=True)))

    return ds.map(ensure), []


def _looks_batched(shapes: list) -> bool:
    """Every feature and target read with one leading size > 1 (a dimension of each unknown, else this is not
    reached): batches of that size (batched with drop_remainder, or examples that divide evenly), not examples."""
    leading = {shape[0] if shape else None for shape in shapes}
    return len(leading) == 1 and (leading.pop() or 0) > 1


def _batched(split: str, names: list[str], specs: list, shapes: list, key: str, value: str) -> Violation:
    shown = ", ".join(f"{name} {spec.shape}" for name, spec in zip(names, specs, strict=True))
    return Violation(
        key,
        value,
        f"unbatched examples ({split}'s {shown}: every element holds {shapes[0][0]} of each, a batch?)",
        "ds.unbatch() (or drop .batch() from the loader: the launcher batches); examples of a fixed length whose "
        f"targets are as long: give the shape, ds.map(lambda x, y: (tf.ensure_shape(x, {shapes[0]}), "
        f"tf.ensure_shape(y, {shapes[-1]})))",
    )


def _differ(split, spec, names, unknown, shapes, other, index, last, key, value) -> Violation:
    """Examples of different shapes: a smaller last element in every leading dimension is a batched dataset's
    remainder; anything else is examples of different lengths, padded or cut to one."""
    i = next(i for i in unknown if shapes[i] != other[i])

    def where(one: str) -> str:
        return f"{split}'s {names[i]} is {_parts(spec)[i].shape}: {shapes[i]} in {one} 0, {other[i]} in {one} {index}"

    leading_only = all(a[1:] == b[1:] and b[:1] < a[:1] for a, b in zip(shapes, other, strict=True) if a != b)
    if last and leading_only and len(unknown) == len(shapes):
        return Violation(
            key,
            value,
            f"unbatched examples of one shape ({where('element')}, the last: batched?)",
            "ds.unbatch() (or drop .batch() from the loader: the launcher batches)",
        )
    axis = next(d for d, (a, b) in enumerate(zip(shapes[i], other[i], strict=True)) if a != b)
    rank = len(shapes[i])
    paddings = ", ".join([f"[0, n - tf.shape(x)[{axis}]]" if d == axis else "[0, 0]" for d in range(rank)])
    cut = ", ".join(":n" if d == axis else ":" for d in range(rank))
    return Violation(
        key,
        value,
        f"unbatched examples of one shape ({where('example')}: ragged?)",
        f"pad or cut {names[i]} of every example to one length n in the loader: x = x[{cut}]; "
        f"x = tf.pad(x, [{paddings}]) in a ds.map (token ids: keras.utils.pad_sequences(sequences, maxlen=n))",
    )
