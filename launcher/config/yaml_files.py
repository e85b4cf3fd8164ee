"""A config file that is not YAML, reported as `file:line:column: problem` with its fix.

Hydra prints a YAML parser's exception with every PyYAML frame (85 lines for one misplaced colon) and no fix. The
file sources Hydra reads from (the launcher's conf, a person's `--config-dir`, a plugin's package) are wrapped so a
parser error becomes Hydra's compact composition error, one line that names the place; `compose_fix` in the entry
point then gives the fix for a file, not for an override.
"""

from __future__ import annotations

from pathlib import Path

import yaml

YAML_FIX = (
    "fix: correct the YAML at that line and column (indentation by spaces, `key: value` with a space after the "
    "colon, brackets and quotes closed); `python -m launcher --cfg job <overrides>` shows the config once it reads."
)

broken: list[str] = []  # the places of this process's YAML errors, in the order Hydra met them


def where(error: Exception, fallback: str) -> str:
    """`file:line:column` of a PyYAML error (1-based, as editors count), else `fallback`."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    if mark is None:
        return fallback
    return f"{mark.name}:{mark.line + 1}:{mark.column + 1}"


def report_yaml_errors_compactly() -> None:
    """Wrap the `load_config` of Hydra's file and package config sources (once per process)."""
    from hydra.errors import ConfigCompositionException

    try:  # Hydra's own modules: another Hydra may move them, and then its own report stands
        from hydra._internal.core_plugins.file_config_source import FileConfigSource
        from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource
    except ImportError:
        return

    for source in (FileConfigSource, ImportlibResourcesConfigSource):
        original = source.load_config
        if getattr(original, "reports_yaml_compactly", False):
            continue

        def load_config(self, config_path: str, _original=original):
            try:
                return _original(self, config_path)
            except yaml.YAMLError as err:
                place = where(err, str(Path(self.path) / config_path))
                broken.append(place)
                problem = getattr(err, "problem", None) or str(err).splitlines()[0]
                raise ConfigCompositionException(f"{place}: {problem} (not valid YAML)") from None

        load_config.reports_yaml_compactly = True
        source.load_config = load_config
