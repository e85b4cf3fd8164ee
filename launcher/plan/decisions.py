"""The Plan: every decision the launcher made, each with its reason, plus warnings.

Plain data: printed at start, written to `plan.yaml`, logged to MLflow as tags.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml


@dataclass(frozen=True)
class Decision:
    key: str
    value: Any
    reason: str


@dataclass
class Plan:
    decisions: dict[str, Decision] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def decide(self, key: str, value: Any, reason: str) -> Any:
        self.decisions[key] = Decision(key, value, reason)
        return value

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def __getitem__(self, key: str) -> Any:
        return self.decisions[key].value

    def get(self, key: str, default: Any = None) -> Any:
        decision = self.decisions.get(key)
        return default if decision is None else decision.value

    def __contains__(self, key: str) -> bool:
        return key in self.decisions

    @property
    def is_chief(self) -> bool:
        """This process tracks and exports (one process, or the chief of a multi-worker job)."""
        return bool(self.get("process.is_chief", True))

    def reason(self, key: str) -> str:
        return self.decisions[key].reason

    def to_dict(self) -> dict:
        return {
            "decisions": {
                d.key: {"value": _plain(d.value), "reason": d.reason}
                for d in self.decisions.values()
            },
            "warnings": list(self.warnings),
        }

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, width=100)

    def tags(self) -> dict[str, str]:
        """One MLflow tag per decision (values only; reasons live in plan.yaml)."""
        return {f"plan.{d.key}": str(_plain(d.value)) for d in self.decisions.values()}

    def render(self) -> str:
        width = max((len(k) for k in self.decisions), default=0)
        lines = ["Plan:"]
        for d in self.decisions.values():
            lines.append(f"  {d.key:<{width}}  {_plain(d.value)!s:<14}  {d.reason}")
        if self.warnings:
            lines.append("Warnings:")
            lines.extend(f"  ! {w}" for w in self.warnings)
        return "\n".join(lines)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.6g}")
    return value
