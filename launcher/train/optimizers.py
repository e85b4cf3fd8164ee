"""The configured optimizer and schedule as objects, and the check that their arguments fit their signatures.

Names and the arguments the launcher owns are checked by the resolver (`launcher.plan.rules.optimizer`); what
needs the classes themselves (yours imported, every argument a real parameter, values Keras accepts) is checked
here, before anything is built, into the same refusal.

The same concept one level up: `launcher.config.optimizers` is the table of the names these objects
are built from.
"""

from __future__ import annotations

import inspect

import keras

from launcher.config.errors import ConfigError, Violation
from launcher.config.imports import import_component, is_import_path
from launcher.config.optimizers import OPTIMIZERS, SCHEDULES
from launcher.train.fused_update import FUSED
from launcher.train.schedules import schedule_class


def optimizer_class(optimizer_config):
    """Keras's optimizer class by table name, or yours by import path (a keras.optimizers.Optimizer subclass)."""
    name = str(optimizer_config.name).strip()
    if not is_import_path(name):
        return getattr(keras.optimizers, OPTIMIZERS[name].keras_class)
    found = import_component("optimizer.name", name, "a keras.optimizers.Optimizer subclass")
    if not (isinstance(found, type) and issubclass(found, keras.optimizers.Optimizer)):
        raise ConfigError.single(
            "optimizer.name",
            name,
            f"a keras.optimizers.Optimizer subclass (got {found!r})",
            "subclass keras.optimizers.Optimizer (or name one of Keras's: optimizer.name=adam)",
        )
    return found


def make_optimizer(optimizer_config, lr, fused: bool = False):
    """The configured optimizer; `fused` swaps in its one-kernel-per-variable twin."""
    cls = optimizer_class(optimizer_config)
    kind = OPTIMIZERS.get(str(optimizer_config.name).strip())
    kwargs = dict(optimizer_config.params)
    if kind is not None and kind.momentum:
        kwargs["momentum"] = optimizer_config.momentum
    decay = optimizer_config.weight_decay or (kind.default_weight_decay if kind is not None else None)
    if decay:
        kwargs["weight_decay"] = decay
    if optimizer_config.use_ema:
        kwargs.update(use_ema=True, ema_momentum=optimizer_config.ema_momentum)
    cls = FUSED[cls] if fused else cls
    if optimizer_config.clipnorm or optimizer_config.global_clipnorm:
        from launcher.train.clipping import clipping

        cls = clipping(cls, optimizer_config.clipnorm, optimizer_config.global_clipnorm)
    return cls(lr, **kwargs)


def optimizer_problems(config, plan) -> list[Violation]:
    """optimizer.params and the schedule's arguments against the classes' signatures; a schedule Keras refuses to
    make from them (piecewise values of another count, a negative rate) is refused with Keras's reason."""
    problems: list[Violation] = []
    name = str(config.optimizer.name).strip()
    try:
        cls = optimizer_class(config.optimizer) if name in OPTIMIZERS or is_import_path(name) else None
    except ConfigError as err:
        problems.extend(err.violations)
        cls = None
    if cls is not None:  # None: an unknown name (the resolver refused it) or one that does not import
        accepted = parameters(cls, keras_own=not is_import_path(name))
        for key, value in dict(config.optimizer.params).items():
            if accepted is not None and key not in accepted:
                problems.append(
                    Violation(
                        f"optimizer.params.{key}",
                        value,
                        f"an argument of {cls.__name__}: one of {sorted(accepted)}",
                        f"drop optimizer.params.{key}",
                    )
                )
    arguments = plan.schedule.lr_schedule_arguments
    if arguments is not None and (plan.optimizer.schedule in SCHEDULES or is_import_path(plan.optimizer.schedule)):
        problems.extend(_schedule_problems(config.optimizer.schedule, arguments))
    return problems


def _schedule_problems(name: str, arguments: dict) -> list[Violation]:
    try:
        make = schedule_class(name)
    except ConfigError as err:
        return list(err.violations)
    accepted = parameters(make, keras_own=not is_import_path(name))
    unknown = [key for key in arguments if accepted is not None and key not in accepted]
    if unknown:
        shown = getattr(make, "__name__", name)
        return [
            Violation(
                "optimizer.schedule" if is_import_path(name) else f"optimizer.schedule_params.{key}",
                name if is_import_path(name) else arguments[key],
                f"an argument of {shown}: one of {sorted(accepted)}"
                + (" (yours must take initial_learning_rate and decay_steps)" if is_import_path(name) else ""),
                f"drop optimizer.schedule_params.{key}" if not is_import_path(name) else f"add {key} to {shown}",
            )
            for key in unknown
        ]
    try:
        made = make(**arguments)
        made(0)  # a schedule that cannot compute its first rate fails here, not at the first step
    except Exception as err:  # Keras's (or yours) own check of the values
        return [
            Violation(
                "optimizer.schedule_params",
                dict(arguments),
                f"arguments {getattr(make, '__name__', name)} accepts ({type(err).__name__}: {str(err)[:300]})",
                "fix optimizer.schedule_params",
            )
        ]
    return []


def parameters(target, keras_own: bool = True) -> set[str] | None:
    """Every named parameter `target` (a class or function) takes, its base classes' included (Keras passes
    **kwargs up to the base optimizer, which refuses unknown ones). None for yours when it takes any keyword
    (nothing to check against)."""
    chain = (
        [part.__init__ for part in target.__mro__ if "__init__" in vars(part)] if isinstance(target, type) else [target]
    )
    names: set[str] = set()
    for function in chain:
        try:
            found = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError):
            continue
        names |= {p.name for p in found if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self"}
        if not any(p.kind == p.VAR_KEYWORD for p in found):
            return names
    return names if keras_own else None
