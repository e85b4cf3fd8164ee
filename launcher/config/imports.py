"""The user's components by import path (`module.path:attribute`) and installed plugins (entry points).

A plugin is a distribution that declares entry points in a group of `PLUGIN_GROUPS` (`launcher.models`,
`launcher.datasets`, `launcher.losses`, `launcher.metrics`, `launcher.callbacks`): its short name then stands
for the import path the entry point holds, and goes through the same checks. A built-in name wins over a
plugin of the same name. `launcher.configs` names a package of Hydra config groups.

Only the module a person named is imported; nothing from config is evaluated. Hydra's `_target_`
instantiation is not used: Hydra 1.4 restricts targets to an allowlist (hydra#3258) and 1.3 already
blocks some, while a plain import path works the same under both and reads the same in every key.
Every failure is a ConfigError naming the key, what was found and the fix.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from importlib.metadata import entry_points

from launcher.config.errors import ConfigError, Violation
from launcher.config.raised import told

# What a plugin provides -> the entry point group that names it.
PLUGIN_GROUPS = {
    "model": "launcher.models",
    "dataset": "launcher.datasets",
    "loss": "launcher.losses",
    "metric": "launcher.metrics",
    "callback": "launcher.callbacks",
    "export": "launcher.exports",
}
CONFIG_GROUP = "launcher.configs"  # entry points naming a package with Hydra config groups (YAML defaults)


def plugins(kind: str) -> dict[str, str]:
    """The installed plugins of one kind, read from their entry points (nothing is imported).

    Args:
        kind: a key of `PLUGIN_GROUPS`: model, dataset, loss, metric or callback.

    Returns:
        name -> import path (`module.path:attribute`), one per entry point in the kind's group.
    """
    return {ep.name: ep.value for ep in entry_points(group=PLUGIN_GROUPS[kind])}


def config_packages() -> list[str]:
    """The packages installed plugins name for their Hydra configs (entry point group `launcher.configs`).

    Returns:
        Package names, each added to Hydra's search path as `pkg://<package>` (its conf groups join the launcher's).
    """
    return [ep.value for ep in entry_points(group=CONFIG_GROUP)]


def component_path(kind: str, name: str) -> str | None:
    """The import path a person's component is named by in the config.

    Args:
        kind: a key of `PLUGIN_GROUPS` (loss, metric, callback, ...).
        name: what the config holds: `module.path:attribute`, or an installed plugin's name.

    Returns:
        `name` itself when it is an import path, the installed plugin's import path when `name` is one's name,
        else None (a built-in name, or none at all: the caller says which choices there are).
    """
    name = str(name).strip()
    if is_import_path(name):
        return name
    return plugins(kind).get(name)


def plugin_choices(kind: str) -> str:
    """How a refusal names the installed plugins of `kind`: their names and group, or that there are none."""
    installed = sorted(plugins(kind))
    group = PLUGIN_GROUPS[kind]
    if installed:
        return f"an installed plugin ({group}: {', '.join(installed)})"
    return f"an installed plugin's name (entry point group {group}; none installed)"


def callback_problems(names) -> list[Violation]:
    """Every name in train.callbacks that is neither an import path nor an installed callback plugin, with the
    installed ones as choices (found with the config's other problems, before anything is imported)."""
    found = []
    for name in names:
        if component_path("callback", name) is None:
            close = difflib.get_close_matches(str(name), sorted(plugins("callback")), n=1, cutoff=0.6)
            found.append(
                Violation(
                    "train.callbacks",
                    name,
                    "your callback as module.path:Name (a keras.callbacks.Callback class or a function returning "
                    f"one), or {plugin_choices('callback')}",
                    f"train.callbacks=[{close[0] if close else 'my_package.callbacks:MyCallback'}]",
                )
            )
    return found


def is_import_path(name: str) -> bool:
    """`module.path:attribute` (a user's component) rather than a built-in name."""
    return ":" in str(name)


def configured_path(kind: str, field: str, section) -> tuple[str, str]:
    """(the key a problem is reported under, the import path) of a custom model's builder or dataset's loader:
    `<kind>.<field>` when set, else the installed plugin called `<kind>.name`."""
    given = str(getattr(section, field)).strip()
    if given:
        return f"{kind}.{field}", given
    installed = plugins(kind)
    if section.name in installed:
        return f"{kind}.name", installed[section.name]
    example = {"model": "my_package.models:build", "dataset": "my_package.data:load"}[kind]
    raise ConfigError.single(
        f"{kind}.{field}",
        "",
        f"your {kind} {field} as module.path:function ({kind}=custom needs one)",
        f"{kind}.{field}={example}",
    )


def import_component(key: str, path: str, wanted: str):
    """The object `path` (module.path:attribute) names; a ConfigError for `key` when it cannot be had."""
    path = str(path).strip()
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigError.single(
            key,
            path,
            f"an import path module.path:attribute naming {wanted}",
            f"{key}=my_package.my_module:my_function",
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and (module_name == err.name or module_name.startswith(err.name + ".")):
            raise ConfigError.single(
                key,
                path,
                f"an importable module (no module named {err.name!r} on the Python "
                "path, which starts with the launch directory)",
                "run from the folder that holds your package, pip install -e it, or add its folder to PYTHONPATH",
            ) from None
        raise _broken(key, path, err) from None
    except Exception as err:  # the user's module itself fails on import: show why, not our traceback
        raise _broken(key, path, err) from None
    found = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            public = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n, None)))
            raise ConfigError.single(
                key,
                path,
                f"{wanted}; module {module_name} has no attribute {attribute!r} (its callables: {public[:12]})",
                f"{key}={module_name}:{public[0] if public else '<name>'}",
            )
        found = getattr(found, part)
    return found


def check_call(key: str, path: str, function, args: tuple, kwargs: dict, shown: str) -> None:
    """Refuse a callable whose signature cannot take these arguments (before calling it)."""
    if not callable(function):
        raise ConfigError.single(
            key, path, f"a callable {shown} (got {type(function).__name__})", f"point {key} at a function"
        )
    try:
        inspect.signature(function).bind(*args, **kwargs)
    except TypeError as err:
        raise ConfigError.single(
            key,
            path,
            f"a callable {shown}; yours is {_name(function)}{_signature(function)} ({err})",
            f"define it as {shown}, or fix the params passed to it",
        ) from None
    except ValueError:
        return  # no signature to read (a builtin): let the call decide


def _signature(function) -> str:
    try:
        return str(inspect.signature(function))
    except (TypeError, ValueError):
        return "(...)"


def _name(function) -> str:
    return getattr(function, "__name__", type(function).__name__)


def _broken(key: str, path: str, err: Exception) -> ConfigError:
    return ConfigError.single(
        key,
        path,
        "a module that imports cleanly (importing it raised the error below)",
        "fix the error in your module where it raised",
        detail=told(err),
    )
