"""What a person's own code raised, told in their own frames: `file:line in function`, the line, the whole message.

A builder, loader, metric or callback that raises is reported as a refusal, not a traceback through the launcher;
the refusal must still say where in the person's code it happened, with the message whole (Keras's layer errors run
to several lines) and without the terminal colour codes Keras puts in them.
"""

from __future__ import annotations

import inspect
import re
import site
import sys
import sysconfig
import traceback
from pathlib import Path

FRAMES_SHOWN = 3
_COLOUR_CODES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _installed() -> frozenset[Path]:
    """Where code that is not the person's lives: the standard library, every place packages are installed (the
    environment's, the user's `pip install --user`, Debian's dist-packages on the path) and the launcher itself."""
    paths = {sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths |= {*site.getsitepackages(), site.getusersitepackages()}
    paths |= {entry for entry in sys.path if entry.endswith(("site-packages", "dist-packages"))}
    return frozenset({Path(p).resolve() for p in paths} | {Path(__file__).resolve().parents[1]})


_NOT_THEIRS = _installed()


def plain(text: str) -> str:
    """`text` without terminal colour codes."""
    return _COLOUR_CODES.sub("", text)


def _theirs(filename: str, home: Path | None) -> bool:
    if filename.startswith("<"):
        return False
    resolved = Path(filename).resolve()
    if home is not None and (resolved == home or resolved.is_relative_to(home)):
        return True
    return not any(resolved.is_relative_to(root) for root in _NOT_THEIRS)


def _home(component: object) -> Path | None:
    """Where the package that defines `component` lives (its top-level package's folder, or the module file of a
    single-file one): an installed plugin's own frames count as theirs."""
    module = inspect.getmodule(component)
    if module is None or not getattr(module, "__file__", None):
        return None
    top = sys.modules.get(module.__name__.partition(".")[0], module)
    folders = list(getattr(top, "__path__", []))
    return Path(folders[0]).resolve() if folders else Path(module.__file__).resolve()


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
