"""Every launch a test starts has its exit code looked at. A launch can do all its work and still end wrong (exit 134
after its Done block, issue 67); a test that only reads the files it left would pass. `warm.run` and
`launcher_here` return a `Launched`, and a test that never reads one's `returncode` fails at its end."""

from __future__ import annotations

import subprocess

import pytest

_started: list[Launched] = []


class Launched(subprocess.CompletedProcess):
    """`subprocess.CompletedProcess` that knows whether its `returncode` was read."""

    def __init__(self, args, returncode: int, stdout=None, stderr=None):
        self.code_read = False
        super().__init__(args, returncode, stdout, stderr)
        _started.append(self)

    @property
    def returncode(self) -> int:
        self.code_read = True
        return self._returncode

    @returncode.setter
    def returncode(self, value: int) -> None:
        self._returncode = value


def _command(launched: Launched) -> str:
    args = launched.args if isinstance(launched.args, list | tuple) else [launched.args]
    return " ".join(str(a) for a in args if "hydra.run.dir=" not in str(a) and "tracking.uri=" not in str(a))


@pytest.fixture(autouse=True)
def every_exit_code_read():
    """Fails a test that started a launch and never looked at its exit code (`assert ran.returncode == ...`)."""
    _started.clear()
    yield
    problem = unread_exit_codes()
    if problem:
        pytest.fail(problem)


def unread_exit_codes() -> str | None:
    """What the launches started since the last call left unread (None: every exit code was read)."""
    unread = [launched for launched in _started if not launched.code_read]
    _started.clear()
    if not unread:
        return None
    codes = "; ".join(f"exit {u._returncode}: {_command(u)[-300:]}" for u in unread)
    return f"the test never asserted the exit code of {len(unread)} launch(es) it started: {codes}"
