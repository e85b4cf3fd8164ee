"""A decision's reason on one console line: cut at a word and marked when it runs longer (plan.yaml keeps it whole).

The Plan on the console is read at a glance; reasons such as the measured matmul rates or a layer swap's
conditions run to 400 characters.
"""

from __future__ import annotations

LINE_WIDTH = 160  # a Plan line on the console, at most (a decision's reason is cut to fit)
CUT = "…"


def brief(reason: str, room: int) -> str:
    """`reason` within `room` characters: cut at the last clause that fits (`; `, `. `, `, `), else at a space,
    and marked as cut."""
    if len(reason) <= room:
        return reason
    room = max(room - len(CUT) - 1, 20)
    head = reason[:room]
    for mark in ("; ", ". ", ", ", " "):
        at = head.rfind(mark)
        if at >= room // 2:
            return head[:at].rstrip(" ,;.") + " " + CUT
    return head.rstrip() + " " + CUT


def one_line(start: str, reason: str) -> str:
    """A console line: `start` (the key and value columns), then as much of the reason as fits."""
    return start + brief(reason, LINE_WIDTH - len(start))
