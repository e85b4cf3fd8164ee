"""A section of the Plan: a frozen dataclass of decided values, each with its key in plan.yaml and its reason.

Every value must come with a reason (checked when the section is made); `launcher.plan.decisions` holds the
sections and the Plan made of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

S = TypeVar("S", bound="Section")


class PlanError(Exception):
    """A programming error: a section without a reason for a value, or a record read before it was decided."""


class Reasons(Mapping[str, str]):
    """A section's reasons by field name: read-only, and copyable and picklable like the rest of the Plan."""

    def __init__(self, reasons: Mapping[str, str]):
        self._items = tuple(dict(reasons).items())

    def __getitem__(self, name: str) -> str:
        for key, reason in self._items:
            if key == name:
                return reason
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __reduce__(self):
        return Reasons, (dict(self._items),)


def decision(key: str, *, optional: bool = False) -> Any:
    """A decided field: `key` is its name in plan.yaml; an optional one may stay undecided (None)."""
    if optional:
        return field(default=None, metadata={"key": key})
    return field(metadata={"key": key})


@dataclass(frozen=True, kw_only=True)
class Section:
    """A group of decisions. Make one with `of(field=(value, reason), ...)`: every value has its reason."""

    why: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        decided = {f.name for f in self._decision_fields() if getattr(self, f.name) is not None}
        missing = sorted(decided - set(self.why))
        extra = sorted(set(self.why) - decided)
        unset = sorted(
            f.name
            for f in self._decision_fields()
            if getattr(self, f.name) is None and f.default is dataclasses.MISSING
        )
        if missing or extra or unset:
            raise PlanError(
                f"{type(self).__name__}: values without a reason {missing}, reasons without a value "
                f"{extra}, required values left undecided {unset}"
            )
        object.__setattr__(self, "why", Reasons(self.why))

    @classmethod
    def of(cls: type[S], **decided: tuple[Any, str] | None) -> S:
        """`of(policy=("mixed_float16", "why"), ...)`; None leaves an optional field undecided."""
        pairs = {name: pair for name, pair in decided.items() if pair is not None}
        return cls(
            **{name: value for name, (value, _) in pairs.items()},
            why={name: reason for name, (_, reason) in pairs.items()},
        )

    @classmethod
    def _decision_fields(cls) -> list[dataclasses.Field]:
        return [f for f in fields(cls) if "key" in f.metadata]

    def reason(self, name: str) -> str:
        """Why field `name` has its value (PlanError when it was not decided)."""
        if name not in self.why:
            raise PlanError(f"{type(self).__name__}.{name} was not decided")
        return self.why[name]

    def decisions(self) -> Iterator[tuple[str, Any, str]]:
        """(plan.yaml key, value, reason) for every decided field, in declaration order."""
        for f in self._decision_fields():
            value = getattr(self, f.name)
            if value is not None:
                yield f.metadata["key"], value, self.why[f.name]
