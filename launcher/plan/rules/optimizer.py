"""Which optimizer and learning-rate schedule a run uses: names checked against the tables, the arguments the
launcher owns kept out of `optimizer.params`, the schedule's required arguments present.

Whether the remaining arguments fit the classes' signatures is checked when the data is loaded
(`launcher.train.optimizers.optimizer_problems`), in the same refusal.
"""

from __future__ import annotations

import difflib

from launcher.config.imports import is_import_path
from launcher.config.optimizers import OPTIMIZERS, OWNED_OPTIMIZER_ARGUMENTS, SCHEDULES
from launcher.config.schema import Config, LrRule
from launcher.plan.decisions import OptimizerPlan
from launcher.plan.rules.findings import Findings

EXAMPLES = {
    "decay_rate": "0.5",
    "boundaries": "[1000,2000]",
    "values": "[0.001,0.0005,0.0001]",
}


def decide_optimizer(config: Config, found: Findings) -> OptimizerPlan:
    opt = config.optimizer
    name = str(opt.name).strip()
    if is_import_path(name):
        optimizer = (name, "yours (optimizer.name), a keras.optimizers.Optimizer subclass")
    elif name in OPTIMIZERS:
        optimizer = (f"keras.optimizers.{OPTIMIZERS[name].keras_class}", f"optimizer.name={name}")
    else:
        found.refuse(
            "optimizer.name",
            name,
            f"one of {sorted(OPTIMIZERS)} (Keras's) or module.path:Name (yours)",
            f"optimizer.name={_closest(name, OPTIMIZERS) or 'adam'}",
        )
        optimizer = (name, "refused: not an optimizer")
    owned = dict(OWNED_OPTIMIZER_ARGUMENTS)
    if name in OPTIMIZERS and OPTIMIZERS[name].momentum:
        owned["momentum"] = "optimizer.momentum"
    for key, value in dict(opt.params).items():
        if key in owned:
            owner = owned[key]
            found.refuse(
                f"optimizer.params.{key}",
                value,
                f"an argument the launcher does not set itself: {key} comes from {owner}",
                f"drop optimizer.params.{key}; set {owner}",
            )
    return OptimizerPlan.of(optimizer=optimizer, schedule=_decide_schedule(config, found))


def _decide_schedule(config: Config, found: Findings) -> tuple[str, str]:
    opt = config.optimizer
    name, given = str(opt.schedule).strip(), dict(opt.schedule_params)
    if is_import_path(name):
        return name, "yours (optimizer.schedule): called with initial_learning_rate, decay_steps and schedule_params"
    kind = SCHEDULES.get(name)
    if kind is None:
        found.refuse(
            "optimizer.schedule",
            name,
            f"one of {sorted(SCHEDULES)} (Keras's) or module.path:Name (yours)",
            f"optimizer.schedule={_closest(name, SCHEDULES) or 'constant'}",
        )
        return name, "refused: not a schedule"
    if kind.keras_class is None and given:
        found.refuse(
            "optimizer.schedule_params",
            given,
            "{} with optimizer.schedule=constant (a constant rate takes no arguments)",
            "optimizer.schedule=cosine (or drop optimizer.schedule_params)",
        )
    for needed in kind.needs:
        if needed not in given:
            found.refuse(
                f"optimizer.schedule_params.{needed}",
                "(missing)",
                f"a value: optimizer.schedule={name} needs {list(kind.needs)}",
                f"+optimizer.schedule_params.{needed}={EXAMPLES.get(needed, '<value>')}",
            )
    if name == "piecewise":
        _check_piecewise(config, given, found)
    return name, f"optimizer.schedule={name}: {kind.description}"


def _check_piecewise(config: Config, given: dict, found: Findings) -> None:
    boundaries, values = given.get("boundaries"), given.get("values")
    if isinstance(boundaries, list) and isinstance(values, list) and len(values) != len(boundaries) + 1:
        found.refuse(
            "optimizer.schedule_params.values",
            values,
            f"one more value than boundaries ({len(boundaries)} boundaries: {len(boundaries) + 1} values)",
            f"optimizer.schedule_params.values=[{','.join(['0.001'] * (len(boundaries) + 1))}]",
        )
    if config.scaling.lr_rule != LrRule.none:
        found.warn(
            f"optimizer.schedule=piecewise: its values are the learning rates themselves; scaling.lr_rule="
            f"{config.scaling.lr_rule.value} does not scale them (it scales optimizer.learning_rate, unused here)"
        )


def _closest(name: str, table: dict) -> str | None:
    match = difflib.get_close_matches(name.lower(), list(table), n=1)
    return match[0] if match else None
