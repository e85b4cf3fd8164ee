"""Value ranges, declared once where each field is declared (`limited(...)` in the schema); the check walks them.

`limited(default, bound)` puts the field's range in its metadata: `out_of_bounds` walks the composed
config and checks every declared range (the resolver reports them with its own findings), and
`limits()` lists them for `--help`. Relations between keys (min_scale <= initial_scale, warmup in
epochs *or* steps, a batch that divides over the replicas) are rules in `launcher.plan.rules`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

from launcher.config.errors import Violation


def _finite(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


# bound -> (holds?, what the error says is expected). NaN fails every comparison; inf is refused where a
# bound is open-ended.
CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    ">= 1": (lambda v: _finite(v) and v >= 1, "an integer >= 1"),
    ">= 0": (lambda v: _finite(v) and v >= 0, "a finite number >= 0"),
    ">= 4": (lambda v: _finite(v) and v >= 4, "an integer >= 4"),
    "> 0": (lambda v: _finite(v) and v > 0, "a finite number > 0"),
    "(0, 1)": (lambda v: _finite(v) and 0 < v < 1, "a fraction in (0, 1)"),
    "(0, 1]": (lambda v: _finite(v) and 0 < v <= 1, "a fraction in (0, 1]"),
    "[0, 1)": (lambda v: _finite(v) and 0 <= v < 1, "a fraction in [0, 1)"),
    "[1, 65535]": (lambda v: _finite(v) and 1 <= v <= 65535, "a port number in 1..65535"),
    "each >= 1": (
        lambda v: len(v) > 0 and all(_finite(x) and x >= 1 for x in v),
        "a non-empty list of integers, each >= 1",
    ),
}


def limited(
    default: Any = dataclasses.MISSING,
    bound: str = "",
    *,
    fix: Any = None,
    when: str = "",
    factory: Callable[[], Any] | None = None,
) -> Any:
    """A dataclass field whose allowed range is `bound` (a key of CHECKS).

    `fix` is the value a refusal suggests (default: the field's default); `when` names a boolean key that
    must be true for the range to matter (e.g. checkpoint.enabled); `factory` for list defaults.
    """
    if bound not in CHECKS:
        raise ValueError(f"unknown bound {bound!r}; one of {sorted(CHECKS)}")
    suggested = fix if fix is not None else (factory() if factory else default)
    metadata = {"bound": bound, "fix": suggested, "when": when}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def declared(node: Any, prefix: str = "") -> Iterator[tuple[str, Any, dict]]:
    """(dotted key, value, metadata) of every limited field in a typed config, nested ones included."""
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        key = f"{prefix}{f.name}"
        if "bound" in f.metadata:
            yield key, value, f.metadata
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from declared(value, f"{key}.")


def lookup(config: Any, dotted: str) -> Any:
    node = config
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def _render(value: Any) -> str:
    return "[" + ",".join(str(v) for v in value) + "]" if isinstance(value, list | tuple) else str(value)


def out_of_bounds(config) -> list[Violation]:
    """Every value outside its declared range, in declaration order, each with its fix as an override."""
    found = []
    for key, value, meta in declared(config):
        if meta["when"] and not lookup(config, meta["when"]):
            continue
        holds, expected = CHECKS[meta["bound"]]
        try:
            ok = holds(value)
        except TypeError:
            ok = False
        if not ok:
            shown = list(value) if isinstance(value, list | tuple) else value
            override = f"{key}={_render(meta['fix'])}"
            found.append(Violation(key, shown, expected, override, overrides=(override,)))
    return found


def limits(node: Any, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted key, what is expected) of every limited field of a typed config (for --help)."""
    return [(key, CHECKS[meta["bound"]][1]) for key, _, meta in declared(node, prefix)]
