"""A decision's reason on one console line: cut at a word and marked when it runs longer (plan.yaml keeps it whole).

The Plan on the console is read at a glance; reasons such as the measured matmul rates or a layer swap's
conditions run to 400 characters.
"""

from __future__ import annotations

LINE_WIDTH = 160  # a Plan line on the console, at most (a decision's reason is cut to fit)
VALUE_WIDTH = 60  # a decided value on the console, at most (a long list of formats or layers)
CUT = "…"


def brief(reason: str, room: int) -> str:
    """`reason` within `room` characters: cut at the last clause that fits (`; `, `. `, `, `), else at a space,
    and marked as cut."""
    if len(reason) <= room:
        return reason
    room = max(room - len(CUT) - 1, 20)
    if len(reason) <= room:  # too little room to cut anything off: the line runs long rather than lose nothing
        return reason
    head = reason[:room]
    for mark in ("; ", ". ", ", ", " "):
        at = head.rfind(mark)
        if at >= room // 2:
            return head[:at].rstrip(" ,;.") + " " + CUT
    return head.rstrip() + " " + CUT


def one_line(key_part: str, value: object, reason: str, pad: int = 0, whole: bool = False) -> str:
    """A console line: `key_part` (the key column as the caller lays it out), the value (cut to VALUE_WIDTH, padded
    to `pad`), then as much of the reason as fits; `whole`: nothing cut."""
    start = f"{key_part}{str(value) if whole else brief(str(value), VALUE_WIDTH):<{pad}}  "
    return start + (reason if whole else brief(reason, LINE_WIDTH - len(start)))
