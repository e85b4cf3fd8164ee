"""The real CLI: `python -m launcher` in a process of its own (warm from the forkserver, or cold), or its real entry
in this test process (`launcher_here`, `cli_here`), and a new interpreter for a snippet (`run_python`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import warm

from support.config import ROOT
from support.exit_codes import Launched
from support.tracking import store


@pytest.fixture
def cli(tmp_path):
    """Run the real `python -m launcher` in a process of its own with a temp run dir and MLflow store: started warm
    (tests/warm.py: forked with TensorFlow already imported) unless it must be a new interpreter."""

    def run(
        *overrides: str,
        timeout: int = 300,
        env: dict | None = None,
        cwd: Path = ROOT,
        new_store: bool = False,
        cold: bool = False,
    ):
        """`new_store`: the launch creates its MLflow store (else it opens an empty one made for the test).
        `cold`: a new interpreter, for tests of what a fresh process prints while it loads TensorFlow."""
        db = tmp_path / "mlflow.db"
        args = [
            sys.executable,
            "-m",
            "launcher",
            f"hydra.run.dir={tmp_path}/run",
            f"tracking.uri={f'sqlite:///{db}' if new_store else store(db)}",
            *overrides,
        ]
        full_env = {**os.environ, **(env or {})}
        return warm.run(args, cwd=cwd, env=full_env, timeout=timeout, cold=cold)

    return run


@pytest.fixture
def launcher_here(capfd, monkeypatch):
    """`python -m launcher <args>` through its real entry (Hydra's main, the shell, exit codes), run in this test
    process with TensorFlow already loaded: about 6 s less per launch. For launches whose test is not about the
    process itself (no kill, no signal, no fresh runtime or device split, no sweep): those start a process."""
    import logging

    from absl import logging as absl_logging

    import launcher.__main__ as cli_module

    def run(args: list[str], cwd: Path, env: dict | None = None) -> Launched:
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        capfd.readouterr()
        with monkeypatch.context() as patch:
            # Hydra configures logging for its job, which closes every handler; absl's (TensorFlow is loaded here,
            # before Hydra, unlike in a CLI process) would close the stream it holds: one of pytest's captures.
            patch.setattr(absl_logging.get_absl_handler().python_handler, "stream", sys.__stderr__)
            patch.setattr(sys, "argv", ["launcher", *args])
            patch.delenv("LAUNCHER_FAULT", raising=False)  # only the fault this launch is given fires in it
            for key, value in (env or {}).items():
                patch.setenv(key, value)
            patch.chdir(cwd)
            patch.syspath_prepend(str(cwd))  # as `python -m` does: the person's packages import from there
            imported, environment = set(sys.modules), dict(os.environ)
            try:
                cli_module.entry()
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            finally:
                # What the launch set for itself (its log-level and MLflow defaults) ends with it, as with its
                # process: the test process's environment stays the one warm starts compare with.
                os.environ.clear()
                os.environ.update(environment)
                # The person's modules: the next launch imports its own. Never the launcher's own (first imported
                # lazily during a launch from the repository root): a second copy would break isinstance checks.
                own = (ROOT / "launcher").resolve().is_relative_to(Path(cwd).resolve())
                for name in set(sys.modules) - imported if not own else ():
                    if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(cwd)):
                        del sys.modules[name]
                for handler in root.handlers:  # Hydra configured logging for its job: undo it
                    if handler not in handlers:
                        handler.close()
                root.handlers[:], root.level = handlers, level
        out, err = capfd.readouterr()
        return Launched(args, code, out, err)

    return run


@pytest.fixture
def cli_here(tmp_path, launcher_here):
    """`cli`'s launch (a temp run dir and MLflow store) through `launcher_here`: in this process."""

    def run(*overrides: str, env: dict | None = None) -> Launched:
        args = [f"hydra.run.dir={tmp_path}/run", f"tracking.uri={store(tmp_path / 'mlflow.db')}", *overrides]
        return launcher_here(args, tmp_path, env)

    return run


def digits_shards(folder: Path, shards: int) -> str:
    """The digits written as TFRecord shards by the converter; returns the training glob."""
    import numpy as np
    from launcher_datasets.to_tfrecord import convert
    from sklearn.datasets import load_digits

    digits = load_digits()
    np.savez(folder / "digits.npz", x=(digits.images / 16.0).astype("float32")[..., None], y=digits.target)
    convert(folder / "digits.npz", folder / "shards", shards=shards)
    return f"{folder}/shards/train-*.tfrecord"


def run_python(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -c <code>` in a new interpreter from the repository root ('' first on sys.path, as for
    `python -m launcher`); its output captured as text. A test that calls it starts a process (marked e2e)."""
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env, timeout=timeout
    )
