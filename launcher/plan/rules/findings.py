"""What the rules report besides their decisions: violations (refused) and warnings (allowed, said)."""

from __future__ import annotations

from dataclasses import dataclass, field

from launcher.config.errors import Violation


@dataclass
class Findings:
    """Collected while resolving, so one ConfigError lists every violation and the Plan every warning."""

    violations: list[Violation] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def refuse(self, key: str, value: object, expected: str, fix: str) -> None:
        self.violations.append(Violation(key, value, expected, fix))

    def warn(self, message: str) -> None:
        self.warnings.append(message)
