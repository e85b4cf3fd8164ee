"""Keys a person types that the launcher does not have: refused with the nearest key it has, and known aliases.

Hydra refuses `trian.epochs=3` and advises `+trian.epochs=3`, which it then accepts: the typo trained with the
default epochs, silently. Every section the launcher declares (a dataclass in `schema.py`) refuses keys it does not
declare, added with `+` too; the sections meant for a person's own keys (`dataset.params`, `model.params`,
`optimizer.params`, `optimizer.schedule_params`, `tracking.tags`, ...: the `dict` fields) take any key.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing

from launcher.config.errors import Violation

# What people type from other tools' habits, and the key the launcher has for it.
ALIASES = {
    "batch_size": "scaling.batch_size",
    "batch": "scaling.batch_size",
    "lr": "optimizer.learning_rate",
    "learning_rate": "optimizer.learning_rate",
    "epochs": "train.epochs",
    "max_steps": "train.max_steps",
    "optimizer.lr": "optimizer.learning_rate",
    "train.batch_size": "scaling.batch_size",
    "train.lr": "optimizer.learning_rate",
}
CLOSE = 0.75  # difflib's ratio for "did you mean": `trian.epochs` -> `train.epochs` is 0.92


def unknown_key_problems(node) -> list[Violation]:
    """Every key of a composed config (an OmegaConf DictConfig) that its declared section does not have."""
    found: list[tuple[str, object, str]] = []
    _walk(node, "", found)
    if not found:
        return []
    known = declared_keys(node)
    return [_violation(key, value, section, known) for key, value, section in found]


def suggestion(key: str, known: list[str]) -> str | None:
    """The key meant by `key`: a known alias; else, in a section that exists, its closest key; else the closest
    declared key (a misspelt section); else the closest last part in any section; else None."""
    if key in ALIASES:
        return ALIASES[key]
    section, _, leaf = key.rpartition(".")
    siblings = {k.rpartition(".")[2]: k for k in known if k.rpartition(".")[0] == section}
    if section and any(k.startswith(f"{section}.") for k in known):
        close = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=CLOSE)
        return siblings[close[0]] if close else ALIASES.get(leaf)
    close = difflib.get_close_matches(key, known, n=1, cutoff=CLOSE)
    if close:
        return close[0]
    by_leaf = {k.rpartition(".")[2]: k for k in known}
    close = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=CLOSE)
    return by_leaf[close[0]] if close else ALIASES.get(leaf)


def schema_keys(schema: type, prefix: str = "") -> list[str]:
    """Every dotted key a dataclass schema declares (nested sections included; user sections as one key)."""
    keys = []
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        inner = hints.get(f.name)
        if dataclasses.is_dataclass(inner):
            keys += schema_keys(inner, f"{prefix}{f.name}.")
        else:
            keys.append(f"{prefix}{f.name}")
    return keys


def declared_keys(node, prefix: str = "") -> list[str]:
    """Every dotted key a composed config's declared sections have (the chosen model's and dataset's included)."""
    from omegaconf import DictConfig, OmegaConf

    declared = _fields(OmegaConf.get_type(node))
    keys = []
    for name in declared or ():
        child = node._get_node(name) if name in node else None
        if isinstance(child, DictConfig) and _fields(OmegaConf.get_type(child)) is not None:
            keys += declared_keys(child, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def _walk(node, prefix: str, found: list) -> None:
    from omegaconf import DictConfig, OmegaConf

    declared = _fields(OmegaConf.get_type(node))
    if declared is None:
        return  # a section for the person's own keys
    for name in node:
        child = node._get_node(name)
        if name not in declared:
            found += [(key, value, prefix[:-1]) for key, value in _leaves(child, f"{prefix}{name}")]
        elif isinstance(child, DictConfig):
            _walk(child, f"{prefix}{name}.", found)


def _fields(object_type) -> set[str] | None:
    if object_type is None or not dataclasses.is_dataclass(object_type):
        return None
    return {f.name for f in dataclasses.fields(object_type)}


def _leaves(child, key: str) -> list[tuple[str, object]]:
    """An unknown key's dotted leaves and values: `+trian.epochs=3` adds section `trian`; `trian.epochs` is the
    typo to name."""
    from omegaconf import DictConfig

    if isinstance(child, DictConfig) and len(child):
        return [leaf for name in child for leaf in _leaves(child._get_node(name), f"{key}.{name}")]
    return [(key, child._value())]


def _violation(key: str, value: object, section: str, known: list[str]) -> Violation:
    meant = suggestion(key, known)
    where = f"a key {section} declares" if section else "a key the launcher declares"
    if meant is None:
        return Violation(
            key,
            value,
            f"{where} (none is named {key!r})",
            f"remove {key}; `python -m launcher --cfg job` lists every key, `--help` every group",
        )
    return Violation(key, value, f"{where} (did you mean {meant}?)", f"{meant}={as_override(value)}")


def as_override(value: object) -> str:
    """A value as a command-line override writes it: lists in brackets, booleans lower-case."""
    if isinstance(value, list | tuple):
        return "[" + ",".join(as_override(v) for v in value) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def typo_hints(overrides: list[str], known: list[str], options: dict[str, list[str]] | None = None) -> list[str]:
    """For Hydra's own refusal of a key it does not have (`trian.epochs=3`: "Could not override"), the key meant,
    instead of its advice to add it with `+` (which the launcher refuses too); for an option a group does not have
    (`model=mpl`), the option meant."""
    hints = []
    for override in overrides:
        key, sep, value = override.lstrip("+~").partition("=")
        if sep and key in (options or {}) and value not in options[key] and "," not in value:
            close = difflib.get_close_matches(value, options[key], n=1, cutoff=0.6)
            if close:
                hints.append(f"{key}={value}: {key} has no option {value!r}; did you mean {key}={close[0]}?")
            continue
        if override.startswith("-") or not sep or key.startswith("hydra.") or key in known:
            continue  # a flag (--config-dir=...), Hydra's own, or a key the launcher has
        if any(k.startswith(f"{key}.") or key.startswith(f"{k}.") for k in known):
            continue  # a section, or a key inside one that takes a person's own keys (model.params.width)
        meant = suggestion(key, known)
        if meant is not None:
            hints.append(f"{key}: the launcher has no such key; did you mean {meant}?  fix: {meant}={value}")
        else:
            hints.append(f"{key}: the launcher has no such key (`python -m launcher --cfg job` lists every key)")
    return hints
