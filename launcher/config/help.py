"""`python -m launcher --help`: the launcher by name and the config groups a person chooses from.

Hydra's default help lists every group it knows, including the `schema/*` groups the launcher
stores only so the YAML options can extend them. The help template in conf/config.yaml asks for
`${launcher_groups:}` instead: the groups and options found in the config folder, with installed
plugins' models and datasets, and the installed losses, metrics and callbacks by the key that takes them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from launcher.config.bounds import CHECKS, limits
from launcher.config.imports import plugins

# Groups under conf/hydra/ that users choose (hydra/launcher=parallel).
HYDRA_GROUPS = ("hydra/launcher",)
# Keys that take an installed plugin's name besides their built-in names: key -> the plugin kind.
PLUGIN_KEYS = {"task.loss": "loss", "task.metrics": "metric", "train.callbacks": "callback", "export.formats": "export"}


def group_listing(conf_dir: Path) -> str:
    """One line per group: `name: option, option` (defaults first as composed by config.yaml)."""
    lines = []
    groups = sorted(p for p in conf_dir.iterdir() if p.is_dir() and p.name != "hydra")

    for group in [*groups, *(conf_dir / g for g in HYDRA_GROUPS)]:
        options = sorted(
            {p.stem for p in group.glob("*.yaml")}
            | (set(plugins(group.name)) if group.name in ("model", "dataset") else set())
        )
        if options:
            lines.append(f"  {group.relative_to(conf_dir).as_posix()}: {', '.join(options)}")
    for key, kind in PLUGIN_KEYS.items():
        installed = sorted(plugins(kind))
        if installed:
            lines.append(f"  {key} (installed plugins): {', '.join(installed)}")
    return "\n".join(lines)


def limit_listing() -> str:
    """One line per value range declared in the schemas: `key (options that have it): what is expected`."""
    from launcher.config.schema import DATASET_SCHEMAS, MODEL_SCHEMAS, Config

    rows: dict[str, tuple[list[str], str]] = {}
    for f in dataclasses.fields(Config):
        if "bound" in f.metadata:
            rows[f.name] = ([], CHECKS[f.metadata["bound"]][1])
        elif f.default_factory is not dataclasses.MISSING:
            rows.update({key: ([], expected) for key, expected in limits(f.default_factory(), f"{f.name}.")})
    for group, schemas in (("model", MODEL_SCHEMAS), ("dataset", DATASET_SCHEMAS)):
        for option, schema in schemas.items():
            for key, expected in limits(schema(), f"{group}."):
                rows.setdefault(key, ([], expected))[0].append(option)
    lines = []
    for key, (options, expected) in sorted(rows.items()):
        where = f" ({', '.join(options)})" if options else ""
        lines.append(f"  {key}{where}: {expected}")
    return "\n".join(lines)


def register_help(conf_dir: str | Path) -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("launcher_groups"):
        OmegaConf.register_new_resolver("launcher_groups", lambda: group_listing(Path(conf_dir)))
    if not OmegaConf.has_resolver("launcher_limits"):
        OmegaConf.register_new_resolver("launcher_limits", limit_listing)
