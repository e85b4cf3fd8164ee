"""ConfigError: every violation of a config, reported at once, never as a TF traceback."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    """One broken rule: which key, what it got, what is valid, and how to fix it."""

    key: str
    value: object
    expected: str
    fix: str
    overrides: tuple[str, ...] = ()
    """The fix as command-line overrides when it is one (the doctor tries these); () when it is advice."""
    detail: str = ""
    """Lines shown between what was expected and the fix: what the person's code raised, and where."""

    def render(self) -> str:
        detail = f"\n{self.detail}" if self.detail else ""
        return f"  - {self.key}={self.value!r}: expected {self.expected}.{detail}\n    fix: {self.fix}"


class ConfigError(Exception):
    """Raised with all violations found, so a person fixes them in one go."""

    def __init__(self, violations: Sequence[Violation], note: str = ""):
        self.violations = tuple(violations)
        count = len(self.violations)
        head = f"Invalid configuration ({count} problem{'s' if count != 1 else ''}):"
        super().__init__("\n".join([head, *(v.render() for v in self.violations), *([note] if note else [])]))

    @classmethod
    def single(cls, key: str, value: object, expected: str, fix: str, detail: str = "") -> ConfigError:
        return cls([Violation(key, value, expected, fix, detail=detail)])


class FailsUnderMixedPolicy(ConfigError):
    """A builder that fails under the mixed `policy` and runs under float32: refused when the precision was asked
    for by name, decided again when precision=auto chose it (`launcher.launch.building`)."""

    def __init__(self, violations: Sequence[Violation], policy: str):
        super().__init__(violations)
        self.policy = policy


def raise_if_any(violations: Iterable[Violation]) -> None:
    found = list(violations)
    if found:
        raise ConfigError(found)
