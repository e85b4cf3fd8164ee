"""Wall-clock budgets as people write them: `2h30m`, `45m`, `90s`, `1d`, `1.5h`, or plain seconds."""

from __future__ import annotations

import re

from launcher.config.errors import Violation

UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")


def parse_duration(text: str) -> float | None:
    """Seconds in `text` ("2h30m" -> 9000.0); None when it does not parse or is not positive."""
    text = str(text).strip().lower().replace(" ", "")
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        parts = PART.findall(text)
        if not parts or "".join(number + unit for number, unit in parts) != text:
            return None
        units = [unit for _, unit in parts]
        if len(set(units)) != len(units):
            return None
        seconds = sum(float(number) * UNITS[unit] for number, unit in parts)
    return seconds if seconds > 0 and seconds != float("inf") else None


def show_duration(seconds: float) -> str:
    """9000 -> "2h30m"; 90 -> "1m30s"; 0.01 -> "0.01s" (under a second as written)."""
    if 0 < seconds < 1:
        return f"{seconds:g}s"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    shown = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs else "")
    return shown or "0s"


def duration_problems(config) -> list:
    """train.max_time that does not parse, as a refusal naming the key (empty = no budget)."""
    text = str(config.train.max_time).strip()
    if not text or parse_duration(text) is not None:
        return []
    return [
        Violation(
            "train.max_time",
            config.train.max_time,
            'a positive duration such as 2h30m, 45m, 90s, 1.5h or seconds ("" = no budget)',
            "train.max_time=2h30m",
        )
    ]
