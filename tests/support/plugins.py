"""Installed plugins faked in this process: the entry points `launcher.config.imports` reads, from a mapping."""

from __future__ import annotations

from importlib.metadata import EntryPoint


def install(monkeypatch, groups: dict[str, dict[str, str]]) -> None:
    """Make `groups` (entry point group -> name -> `module.path:attribute`) the installed entry points the launcher
    sees, as a distribution's entry_points.txt declares them; every other group has none."""

    def entry_points(group: str) -> list[EntryPoint]:
        return [EntryPoint(name, value, group) for name, value in groups.get(group, {}).items()]

    monkeypatch.setattr("launcher.config.imports.entry_points", entry_points)
