"""A search space over any config key: parsed from YAML, checked against the config, sampled by an Optuna trial.

Each key under `hydra.sweeper.params` is one dimension, written either as a mapping

    optimizer.learning_rate: {low: 1.0e-4, high: 10, log: true}        # float (a bound is a float)
    train.epochs: {low: 2, high: 8, step: 2}                            # int (both bounds ints)
    model.hidden_units: {choices: [[64], [128, 64]]}                   # categorical (any values)
    optimizer.momentum: {low: 0.0, high: 0.99, when: {optimizer.name: sgd}}   # only when the condition holds

or in Hydra's sweep syntax (`choice(a,b)`, `range(1,9,2)`, `interval(0.1,1)`, `tag(log, interval(1e-4,1))`), also
on the command line. Values reach the job as Hydra overrides; a categorical value is kept as its override text
(Optuna stores only scalars), so a list such as `[128,64]` is one choice.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from launcher.config.bounds import CHECKS
from launcher.config.errors import Violation

FLOAT, INT, CATEGORICAL = "float", "int", "categorical"
SPEC_KEYS = {"low", "high", "log", "step", "choices", "when", "type"}


@dataclass(frozen=True)
class Dimension:
    """One searched key: a float or int range (log and step optional) or a list of choices, maybe conditional."""

    key: str
    kind: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[str, ...] = ()
    when: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def grid(self) -> list:
        """Every value a grid search visits: the choices, or the range walked by its step."""
        if self.kind == CATEGORICAL:
            return list(self.choices)
        step = self.step or 1  # an int range steps by 1 unless told
        count = int(math.floor((self.high - self.low) / step + 1e-9)) + 1
        values = [self.low + i * step for i in range(count)]
        return [int(v) for v in values] if self.kind == INT else [round(v, 12) for v in values]

    def active(self, value_of: Callable[[str], str | None]) -> bool:
        """Whether the condition holds for the values chosen so far (the config's, for keys not searched)."""
        return all(value_of(key) in allowed for key, allowed in self.when.items())

    def as_grid(self) -> Dimension:
        """This dimension as the categorical one a grid search suggests from."""
        return Dimension(self.key, CATEGORICAL, choices=tuple(override_text(v) for v in self.grid()))

    def describe(self) -> str:
        if self.kind == CATEGORICAL:
            text = f"one of {list(self.choices)}"
        else:
            text = f"{self.kind} in [{self.low}, {self.high}]" + (" (log)" if self.log else "")
            text += f" step {self.step}" if self.step else ""
        return text + (f" when {dict(self.when)}" if self.when else "")


def override_text(value: Any) -> str:
    """A value as Hydra reads it back on the command line (lists and bools included)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(override_text(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _condition(when: Any) -> dict[str, tuple[str, ...]]:
    if not when:
        return {}
    return {
        str(key): tuple(override_text(v) for v in (allowed if isinstance(allowed, (list, tuple)) else [allowed]))
        for key, allowed in dict(when).items()
    }


def parse_dimension(key: str, spec: Any) -> Dimension:
    """One dimension from its YAML (a mapping, a list of choices, or Hydra's sweep syntax). ValueError when the
    spec cannot be read; its message says what it expected."""
    if isinstance(spec, str):
        return _from_sweep_syntax(key, spec)
    if isinstance(spec, (list, tuple)):
        return Dimension(key, CATEGORICAL, choices=tuple(override_text(v) for v in spec))
    if not isinstance(spec, Mapping):
        raise ValueError("a mapping ({low, high} or {choices}), a list of choices, or choice()/range()/interval()")
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise ValueError(f"a mapping with keys among {sorted(SPEC_KEYS)} (unknown: {unknown})")
    when = _condition(spec.get("when"))
    if "choices" in spec:
        choices = spec["choices"]
        if not isinstance(choices, (list, tuple)) or not choices:
            raise ValueError("choices: a non-empty list")
        return Dimension(key, CATEGORICAL, choices=tuple(override_text(v) for v in choices), when=when)
    if "low" not in spec or "high" not in spec:
        raise ValueError("both low and high (a range) or choices (a list)")
    low, high, step = spec["low"], spec["high"], spec.get("step")
    numbers = [v for v in (low, high, step) if v is not None]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers):
        raise ValueError("numbers for low, high and step")
    kind = str(spec.get("type") or (INT if all(isinstance(v, int) for v in numbers) else FLOAT))
    if kind not in (FLOAT, INT):
        raise ValueError("type: float or int")
    cast = int if kind == INT else float
    return Dimension(
        key,
        kind,
        low=cast(low),
        high=cast(high),
        log=bool(spec.get("log", False)),
        step=cast(step) if step is not None else None,
        when=when,
    )


def _from_sweep_syntax(key: str, text: str) -> Dimension:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        value = OverridesParser.create().parse_override(f"{key}={text}").value()
    except Exception as error:  # Hydra's grammar error, reported as the spec it could not read
        raise ValueError(f"Hydra's sweep syntax: choice(...), range(...), interval(...) ({error})") from None
    return from_sweep(key, value)


def from_sweep(key: str, value: Any) -> Dimension:
    """A dimension from a value Hydra's parser made of a sweep override (`choice`, `range`, `interval`, tagged)."""
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

    log = "log" in getattr(value, "tags", set())
    if isinstance(value, ChoiceSweep):
        return Dimension(key, CATEGORICAL, choices=tuple(override_text(v) for v in value.list))
    if isinstance(value, RangeSweep):
        kind = INT if all(isinstance(v, int) for v in (value.start, value.stop, value.step)) else FLOAT
        cast = int if kind == INT else float
        # range() excludes its stop, as Python's does: the last value is stop - step.
        return Dimension(
            key, kind, low=cast(value.start), high=cast(value.stop - value.step), step=cast(value.step), log=log
        )
    if isinstance(value, IntervalSweep):
        kind = INT if isinstance(value.start, int) and isinstance(value.end, int) else FLOAT
        cast = int if kind == INT else float
        return Dimension(key, kind, low=cast(value.start), high=cast(value.end), log=log)
    return Dimension(key, CATEGORICAL, choices=(override_text(value),))


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{optimizer: {learning_rate: {low: ..}}}` -> `{optimizer.learning_rate: {low: ..}}`: nested keys can be set
    from the command line (`+hydra.sweeper.params.optimizer.learning_rate=...`), dotted ones only in YAML."""
    flat: dict[str, Any] = {}
    for key, spec in (params or {}).items():
        if isinstance(spec, Mapping) and spec and not set(spec) & SPEC_KEYS:
            flat.update(flatten(spec, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = spec
    return flat


def in_condition_order(dimensions: list[Dimension]) -> list[Dimension]:
    """The dimensions in their written order, except that a conditional one comes after the searched keys its
    condition reads (else it would read the config's value, not the trial's)."""
    placed: list[Dimension] = []
    waiting = list(dimensions)
    keys = {d.key for d in dimensions}
    while waiting:
        ready = next(
            (d for d in waiting if all(k not in keys or k in {p.key for p in placed} for k in d.when)), waiting[0]
        )  # a cycle of conditions keeps the written order
        placed.append(ready)
        waiting.remove(ready)
    return placed


def parse_space(params: Mapping[str, Any]) -> tuple[list[Dimension], list[Violation]]:
    """Every dimension that parses, and a Violation for each that does not."""
    dimensions, problems = [], []
    for key, spec in flatten(params).items():
        try:
            dimensions.append(parse_dimension(str(key), spec))
        except ValueError as error:
            problems.append(
                Violation(
                    f"hydra.sweeper.params.{key}",
                    spec,
                    str(error),
                    f"e.g. hydra.sweeper.params.{key}='{{low: 0.001, high: 0.1, log: true}}' or '{{choices: [a, b]}}'",
                )
            )
    return dimensions, problems


@dataclass(frozen=True)
class KeyFacts:
    """What the config says about a key: whether it exists, its current value, its declared bound, and the
    options when it is a config group (model, precision, ...)."""

    exists: bool
    value: Any = None
    bound: str | None = None
    options: tuple[str, ...] | None = None


def space_problems(
    dimensions: Iterable[Dimension], facts: Callable[[str], KeyFacts], all_keys: Iterable[str]
) -> list[Violation]:
    """Every dimension that does not fit its key: an unknown key, a range on a non-number, a float range on an
    int, bounds the key refuses or that are upside down, a choice its config group does not have."""
    problems: list[Violation] = []
    known = list(all_keys)
    searched: set[str] = set()
    for dim in dimensions:
        where = f"hydra.sweeper.params.{dim.key}"
        fact = facts(dim.key)
        if not fact.exists:
            close = difflib.get_close_matches(dim.key, known, n=3, cutoff=0.6)
            problems.append(
                Violation(
                    where,
                    dim.describe(),
                    "a key of the config (`python -m launcher --cfg job` lists them)",
                    f"did you mean {' or '.join(close)}?" if close else "search a key the config has",
                )
            )
            continue
        problems += _fit_problems(dim, fact, where)
        for key in dim.when:
            if key not in searched and not facts(key).exists:
                problems.append(
                    Violation(
                        f"{where}.when",
                        dict(dim.when),
                        "conditions on a key searched earlier in the space, or a key of the config",
                        f"list {key} before {dim.key}, or fix its name",
                    )
                )
        searched.add(dim.key)
    return problems


def _fit_problems(dim: Dimension, fact: KeyFacts, where: str) -> list[Violation]:
    if fact.options is not None:
        missing = [c for c in dim.choices if c not in fact.options]
        if dim.kind != CATEGORICAL or missing:
            return [
                Violation(
                    where,
                    dim.describe(),
                    f"choices among the config group's options {list(fact.options)}",
                    f"hydra.sweeper.params.{dim.key}='{{choices: [{', '.join(fact.options[:2])}]}}'",
                )
            ]
        return []
    if dim.kind == CATEGORICAL:
        return []
    value = fact.value
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not numeric and value is not None:
        return [
            Violation(
                where,
                dim.describe(),
                f"choices: {dim.key} holds {type(value).__name__} values ({value!r}), not a number",
                f"hydra.sweeper.params.{dim.key}='{{choices: [...]}}'",
            )
        ]
    if dim.kind == FLOAT and isinstance(value, int):
        return [
            Violation(
                where,
                dim.describe(),
                f"an int range: {dim.key} is an integer",
                f"hydra.sweeper.params.{dim.key}='{{low: {math.ceil(dim.low)}, high: {math.floor(dim.high)}}}'",
            )
        ]
    problems = []
    if dim.low > dim.high:
        problems.append(Violation(where, dim.describe(), "low <= high", "swap low and high"))
    if dim.log and dim.low <= 0:
        problems.append(Violation(where, dim.describe(), "low > 0 on a log scale", "a positive low, or log: false"))
    if dim.log and dim.step:
        problems.append(Violation(where, dim.describe(), "log or step, not both (Optuna)", "drop step or log"))
    if dim.step is not None and dim.step <= 0:
        problems.append(Violation(where, dim.describe(), "step > 0", "a positive step"))
    if fact.bound:
        holds, expected = CHECKS[fact.bound]
        outside = [v for v in (dim.low, dim.high) if not holds(v)]
        if outside:
            problems.append(
                Violation(
                    where, dim.describe(), f"bounds {dim.key} accepts: {expected}", f"keep low and high {fact.bound}"
                )
            )
    return problems


def suggest(trial, dimensions: Iterable[Dimension], config_value: Callable[[str], str | None]) -> dict[str, str]:
    """The trial's values for the active dimensions, in order, as override text by key."""
    chosen: dict[str, str] = {}

    def seen(key: str) -> str | None:
        return chosen[key] if key in chosen else config_value(key)

    for dim in dimensions:
        if not dim.active(seen):
            continue
        if dim.kind == CATEGORICAL:
            value = trial.suggest_categorical(dim.key, list(dim.choices))
        elif dim.kind == INT:
            value = trial.suggest_int(dim.key, dim.low, dim.high, step=dim.step or 1, log=dim.log)
        else:
            value = trial.suggest_float(dim.key, dim.low, dim.high, step=dim.step, log=dim.log)
        chosen[dim.key] = override_text(value)
    return chosen


def grid_space(dimensions: Iterable[Dimension]) -> tuple[dict[str, list], list[Violation]]:
    """The grid sampler's space; a float range without a step or a conditional key cannot be a grid."""
    space, problems = {}, []
    for dim in dimensions:
        if dim.when or (dim.kind == FLOAT and not dim.step):
            problems.append(
                Violation(
                    f"hydra.sweeper.params.{dim.key}",
                    dim.describe(),
                    "for sampler=grid: choices, an int range, or a float range with a step (and no condition)",
                    "add step: ..., or use hydra.sweeper.sampler.name=tpe",
                )
            )
            continue
        space[dim.key] = list(dim.as_grid().choices)
    return space, problems


def override_of(key: str, value: Any) -> str:
    """`key=value` for a value a trial stored (a categorical's is already override text)."""
    return f"{key}={value if isinstance(value, str) else override_text(value)}"
