"""`python -m launcher [overrides]`: the thin Hydra entry point."""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from launcher.schema import register_configs

CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")

register_configs()


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    from launcher.app import main_in_hydra

    main_in_hydra(cfg)


def entry() -> None:
    main()


if __name__ == "__main__":
    main()
