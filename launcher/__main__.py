"""`python -m launcher [overrides]`: compose with Hydra, then one launch or one sweep job."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from launcher.config.help import register_help
from launcher.config.schema import register_configs

CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")
COMPOSE_FIX = (
    "fix: give that key one of the listed options or a value of the expected type. "
    "`python -m launcher --help` lists "
    "every config group and its options; `python -m launcher --cfg job` prints every key with "
    "its current value."
)

register_configs()
register_help(CONF_DIR)
_task_started = False


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> float | None:
    global _task_started
    _task_started = True
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    if getattr(cfg.mode, "value", cfg.mode) == "doctor" and hydra_cfg.mode != RunMode.MULTIRUN:
        from launcher.doctor.launch import doctor_in_hydra

        doctor_in_hydra(cfg, hydra_cfg)
        return None
    if hydra_cfg.mode == RunMode.MULTIRUN:
        from launcher.sweep.job import run_job

        # A fresh process per job; its return value is the objective sweepers such as Optuna optimise.
        return run_job(cfg, hydra_cfg)
    from launcher.run.launch import launch_in_hydra

    launch_in_hydra(cfg, hydra_cfg)
    return None


def plugin_search_path(argv: list[str]) -> list[str]:
    """Installed plugins' config packages (entry points `launcher.configs`) join Hydra's search path, after any
    hydra.searchpath the person gave: their model/dataset/experiment YAML become choices."""
    from launcher.config.imports import config_packages

    packages = [f"pkg://{p}" for p in config_packages()]
    if not packages:
        return argv
    given = [a for a in argv if a.startswith("hydra.searchpath=")]
    rest = [a for a in argv if not a.startswith("hydra.searchpath=")]
    listed = given[-1].split("=", 1)[1].strip("[]") if given else ""
    paths = [p.strip() for p in listed.split(",") if p.strip()] + packages
    return [*rest, f"hydra.searchpath=[{','.join(paths)}]"]


def entry() -> None:
    """Run Hydra; when composing the config fails, add the fix to Hydra's message."""
    sys.argv[1:] = plugin_search_path(sys.argv[1:])
    try:
        main()
    except SystemExit as exit_:
        if exit_.code not in (0, None) and not _task_started:
            print(COMPOSE_FIX, file=sys.stderr)
        raise


if __name__ == "__main__":
    entry()
