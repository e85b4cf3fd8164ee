"""A launch composes its config once (`launcher.config.run_mode`): Hydra's extra compose that only reads `hydra.mode`
is skipped for a plain run, and a config file that sets `hydra.mode` is still read as Hydra reads it."""

from __future__ import annotations

import pytest
from hydra._internal.hydra import Hydra

from launcher.config.run_mode import decided_by_flags


@pytest.mark.parametrize(
    ("argv", "a_run"),
    [
        (["train.epochs=3", "hydra.run.dir=x"], True),
        ([], True),
        (["-m", "precision=fp32,bf16"], False),
        (["--multirun", "precision=fp32,bf16"], False),
        (["hydra.mode=MULTIRUN"], False),
        (["+hydra.mode=RUN"], False),
        (["hydra.modes=1"], True),
    ],
)
def test_only_a_command_line_without_multirun_or_a_mode_override_is_taken_as_a_run_at_once(argv, a_run):
    assert decided_by_flags(argv) is a_run


class Swept(BaseException):
    """Raised by the spy in place of Hydra's multirun: the sweep is not run, only seen to start."""


@pytest.fixture
def composes(monkeypatch):
    """Every compose Hydra makes, by run mode; a multirun is stopped before it sweeps (`Swept`)."""
    seen: list[str] = []
    compose = Hydra.compose_config

    def counted(self, *args, **kwargs):
        seen.append(kwargs["run_mode"].name)
        return compose(self, *args, **kwargs)

    def multirun(self, *args, **kwargs):
        raise Swept

    monkeypatch.setattr(Hydra, "compose_config", counted)
    monkeypatch.setattr(Hydra, "multirun", multirun)
    return seen


def test_a_plain_launch_composes_once_and_restores_hydra(tmp_path, launcher_here, composes):
    spy = Hydra.compose_config
    done = launcher_here([f"hydra.run.dir={tmp_path}/run", "explain=true", "tracking.enabled=false"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert composes == ["RUN"]  # Hydra alone: MULTIRUN (get_mode's) then RUN
    assert Hydra.compose_config is spy and Hydra.get_mode.__module__ == "hydra._internal.hydra"


def test_a_mode_a_config_file_sets_is_read_as_hydra_reads_it(tmp_path, launcher_here, composes):
    experiments = tmp_path / "conf" / "experiment"
    experiments.mkdir(parents=True)
    (experiments / "swept.yaml").write_text("# @package _global_\nhydra:\n  mode: MULTIRUN\n")
    (experiments / "ran.yaml").write_text("# @package _global_\nhydra:\n  mode: RUN\n")
    conf = ["--config-dir", str(tmp_path / "conf"), f"hydra.run.dir={tmp_path}/run", "explain=true"]
    with pytest.raises(Swept):  # a sweep, as without the launcher's shortcut, and no run dir made for a run first
        launcher_here([*conf, "experiment=swept"], tmp_path)
    assert composes == ["RUN", "MULTIRUN"] and not (tmp_path / "run").exists()
    composes.clear()
    done = launcher_here([*conf, "experiment=ran", "tracking.enabled=false"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert composes == ["RUN"]
