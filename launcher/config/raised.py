"""What a person's own code raised, told in their own frames: `file:line in function`, the line, the whole message.

A builder, loader, metric or callback that raises is reported as a refusal, not a traceback through the launcher;
the refusal must still say where in the person's code it happened, with the message whole (Keras's layer errors run
to several lines) and without the terminal colour codes Keras puts in them.
"""

from __future__ import annotations

import inspect
import re
import sysconfig
import traceback
from pathlib import Path

FRAMES_SHOWN = 3
_COLOUR_CODES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Code that is not the person's: the standard library, installed packages, the launcher itself.
_NOT_THEIRS = tuple(
    {str(Path(sysconfig.get_paths()[name]).resolve()) for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {str(Path(__file__).resolve().parents[1])}
)


def plain(text: str) -> str:
    """`text` without terminal colour codes."""
    return _COLOUR_CODES.sub("", text)


def _theirs(filename: str, home: str | None) -> bool:
    if filename.startswith("<"):
        return False
    resolved = str(Path(filename).resolve())
    return (home is not None and resolved.startswith(home)) or not resolved.startswith(_NOT_THEIRS)


def _home(component: object) -> str | None:
    """The directory of the module that defines `component`: an installed plugin's own frames count as theirs."""
    module = inspect.getmodule(component)
    filename = getattr(module, "__file__", None)
    home = str(Path(filename).resolve().parent) if filename else None
    return None if home in _NOT_THEIRS else home  # a single-file module installed among every other package


def own_frames(err: BaseException, component: object = None) -> list[traceback.FrameSummary]:
    """The last frames of `err`'s traceback in the person's files (and in the directory of `component`'s module,
    which may be an installed plugin's)."""
    home = _home(component) if component is not None else None
    frames = traceback.extract_tb(err.__traceback__)
    return [frame for frame in frames if _theirs(frame.filename, home)][-FRAMES_SHOWN:]


def told(err: BaseException, component: object = None, indent: str = "      ") -> str:
    """`Type: message` (whole, plain), then where it was raised in the person's code, one frame a line; every line
    indented by `indent`, to sit under the refusal's key."""
    message = plain(str(err)).strip()
    lines = (f"{type(err).__name__}: {message}" if message else type(err).__name__).splitlines()
    where = [
        f"{frame.filename}:{frame.lineno} in {frame.name}" + (f": {frame.line.strip()}" if frame.line else "")
        for frame in own_frames(err, component)
    ]
    if where:
        lines += ["raised at:", *("  " + line for line in where)]
    return "\n".join((indent + line).rstrip() for line in lines)
