"""The hyper-parameter search's samplers and pruners, by name: what each is, and how to build it from a spec.

A spec is the YAML a person writes under `hydra.sweeper.sampler` / `hydra.sweeper.pruner`: `name` picks the
row, every other key is an argument of the Optuna class (checked against its signature before anything runs).
The search sweeper builds both; a trial's training process builds only the pruner, from the spec the sweeper
stored on the study, so both sides prune by the same rule.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.config.errors import Violation


@dataclass(frozen=True)
class Entry:
    """One row of a table: the Optuna class (in `optuna.samplers` / `optuna.pruners`) and what it does."""

    cls: str
    does: str
    multi_objective: bool = True


SAMPLERS = {
    "tpe": Entry("TPESampler", "Tree-structured Parzen Estimator: learns from every finished trial (the default)"),
    "random": Entry("RandomSampler", "independent uniform draws: a baseline, and any space"),
    "grid": Entry("GridSampler", "every combination once (choices, and int/float ranges with a step)"),
    "cmaes": Entry("CmaEsSampler", "CMA-ES over the float and int keys (categorical ones drawn at random)", False),
    "qmc": Entry("QMCSampler", "quasi-random (Sobol) points that cover the space evenly"),
    "nsga2": Entry("NSGAIISampler", "a genetic algorithm for multi-objective searches"),
}

PRUNERS = {
    "none": Entry("NopPruner", "every trial runs to its last epoch"),
    "median": Entry("MedianPruner", "stops a trial worse than the median of earlier trials at the same epoch", False),
    "percentile": Entry(
        "PercentilePruner", "stops a trial outside the best `percentile` of earlier trials at that epoch", False
    ),
    "successive_halving": Entry(
        "SuccessiveHalvingPruner", "asynchronous successive halving (ASHA): keeps the best 1/reduction_factor", False
    ),
    "hyperband": Entry("HyperbandPruner", "several successive-halving brackets at once", False),
    "threshold": Entry("ThresholdPruner", "stops a trial whose value leaves [lower, upper] (or is NaN)", False),
}

# Arguments the launcher fills itself: a person sets them elsewhere (the seed under sampler.seed, the grid from
# the search space).
OWNED = {"grid": ("search_space",)}


def _table(kind: str) -> dict[str, Entry]:
    return SAMPLERS if kind == "sampler" else PRUNERS


def _optuna_class(kind: str, name: str):
    import optuna

    module = optuna.samplers if kind == "sampler" else optuna.pruners
    return getattr(module, _table(kind)[name].cls)


def spec_problems(kind: str, spec: Mapping, key: str) -> list[Violation]:
    """What is wrong with a sampler or pruner spec: an unknown name, an argument its class does not take."""
    table = _table(kind)
    name = str(spec.get("name", ""))
    if name not in table:
        return [
            Violation(
                f"{key}.name",
                name,
                "one of " + "; ".join(f"{n} ({e.does})" for n, e in table.items()),
                f"{key}.name={next(iter(table))}",
            )
        ]
    arguments = {k: v for k, v in spec.items() if k != "name"}
    taken = inspect.signature(_optuna_class(kind, name)).parameters
    owned = OWNED.get(name, ())
    unknown = sorted(k for k in arguments if k not in taken or k in owned)
    if not unknown:
        return []
    accepted = sorted(k for k in taken if k not in owned and k not in ("self", "kwargs", "args"))
    return [
        Violation(
            f"{key}.{unknown[0]}",
            arguments[unknown[0]],
            f"an argument of optuna's {table[name].cls}: one of {accepted}"
            + (f" ({', '.join(owned)} comes from the search space)" if owned else ""),
            f"remove {', '.join(f'{key}.{k}' for k in unknown)}",
        )
    ]


def make_pruner(spec: Mapping):
    """The Optuna pruner a spec names (`{name: median, n_warmup_steps: 1}`)."""
    name = str(spec.get("name", "none"))
    return _optuna_class("pruner", name)(**{k: v for k, v in spec.items() if k != "name"})


def make_sampler(spec: Mapping, seed: int | None, grid: dict | None = None):
    """The Optuna sampler a spec names, seeded with `seed`; grid takes the search space's values."""
    name = str(spec.get("name", "tpe"))
    arguments = {k: v for k, v in spec.items() if k not in ("name", "seed")}
    cls = _optuna_class("sampler", name)
    if name == "grid":
        arguments["search_space"] = grid or {}

        class AskAndTellGrid(cls):
            """Optuna's grid sampler stops the study when the grid is done, which only `optimize()` allows; the
            search asks no more than the grid's size itself."""

            def after_trial(self, study, trial, state, values) -> None:
                pass

        cls = AskAndTellGrid
    if "seed" in inspect.signature(cls).parameters:
        arguments["seed"] = seed
    return cls(**arguments)


def prunes(spec: Mapping | None) -> bool:
    return bool(spec) and str(spec.get("name", "none")) != "none"


# What the sweeper stores on the study for its trials' training processes (Optuna user attributes).
STUDY_PRUNER, STUDY_OBJECTIVES = "launcher.pruner", "launcher.objectives"
