"""Hydra's run mode, read without composing the whole config a second time.

Hydra composes every config twice: once (`Hydra.get_mode`) only to read `hydra.mode`, then again for the run
(hydra-ecosystem/hydra#3440): ~0.3 CPU-s of every launch, a tenth of a small one. The mode comes from a config only
where a file sets `hydra.mode`, which almost none does: a launch without `-m` and without a `hydra.mode` override is
taken as a run at once, and the run's own compose shows whether a file set the mode. If one set MULTIRUN, the
launch is started again the way Hydra reads it (`ModeSetByConfig`), before anything was written: Hydra makes the run
dir after that compose.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

MULTIRUN_FLAGS = {"-m", "--multirun"}


class ModeSetByConfig(BaseException):
    """A config file set `hydra.mode` to what a plain run is not: Hydra's own reading decides. A BaseException so
    that Hydra's `run_and_report` (which turns every Exception into a printed error and exit 1) lets it through."""


def decided_by_flags(argv: list[str]) -> bool:
    """Whether the command line alone says this is a run: no `-m` and no override of `hydra.mode`."""
    if MULTIRUN_FLAGS & set(argv):
        return False
    return not any(a.split("=", 1)[0].lstrip("+~") == "hydra.mode" for a in argv)


@contextlib.contextmanager
def run_without_mode_compose(argv: list[str]) -> Iterator[None]:
    """Within the block, Hydra takes a plain run as one without its extra compose (`argv` decides: see
    `decided_by_flags`); outside it, and for any other command line, Hydra is as shipped."""
    if not decided_by_flags(argv):
        yield
        return
    from hydra._internal.hydra import Hydra
    from hydra.types import RunMode

    compose = Hydra.compose_config

    def mode_from_flags(self, config_name, overrides):
        return RunMode.RUN  # no `hydra.mode=RUN` override added: a file's mode stays visible to the check below

    def compose_then_check(self, *args, **kwargs):
        config = compose(self, *args, **kwargs)
        if kwargs.get("run_mode") == RunMode.RUN and config.hydra.mode not in (None, RunMode.RUN):
            raise ModeSetByConfig(str(config.hydra.mode))
        return config

    with contextlib.ExitStack() as patches:
        for name, replacement in (("get_mode", mode_from_flags), ("compose_config", compose_then_check)):
            patches.callback(setattr, Hydra, name, getattr(Hydra, name))
            setattr(Hydra, name, replacement)
        yield
