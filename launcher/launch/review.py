"""Every check of a config and its data before anything is written: the resolver's rules, the data, the model
against the data, the schedule, collected into one list so a refusal names every problem at once.

A launch, an evaluation, the doctor and its trials all review the same way; the review returns a typed
`Review`, with the strategy when the caller asked for the runtime to be started.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from launcher.config.errors import ConfigError, Violation, raise_if_any
from launcher.config.schema import Config
from launcher.launch.init_source import InitSource, locate_init_source
from launcher.plan.data_facts import NO_FACTS, DataFacts
from launcher.plan.decisions import Plan
from launcher.plan.resolve import resolve_all
from launcher.plan.schedule import schedule
from launcher.plan.sharding import decide_sharding
from launcher.train.labels import fit_to_task
from launcher.train.runtime import float32_policy, use_policy


@dataclass
class Review:
    """The Plan (complete: a refused value is decided as asked), the data (None when it could not load), every
    problem found, and the strategy the runtime callback made (None when it was not asked for, or not reached)."""

    plan: Plan
    source: Any = None
    problems: list[Violation] = field(default_factory=list)
    strategy: Any = None
    init_source: InitSource | None = None  # model.init_from, found (None: from scratch, or not found)


def review(config: Config, env, start_runtime: Callable[[Plan], Any] | None = None) -> Review:
    """Check everything; `start_runtime(plan)` runs between the rules and the data when the rules pass
    (TensorFlow's devices must be set before anything touches them) and its result is the Review's strategy."""
    plan, problems = resolve_all(config, env)
    strategy = start_runtime(plan) if not problems and start_runtime is not None else None
    broken = {p.key.split(".")[0] for p in problems}  # a group with a refused value is not used further
    source = None if "dataset" in broken else collecting(problems, load_data, config)
    if source is not None:
        plan = _with_data_facts(config, env, plan, problems, collecting(problems, data_facts, source))
    if source is not None and "model" not in broken:
        collecting(problems, check_model, config, source)
    if source is not None:
        plan, num_train = decide_sharding(plan, source.train_shards, source.num_train)
        scheduled = collecting(problems, schedule, config, plan, num_train, source.num_val, source.num_test)
        if scheduled is not None:
            plan = scheduled
            problems.extend(check_optimizer(config, plan, problems))
    init_source = None
    if str(getattr(config.model, "init_from", "") or "").strip() and "model" not in broken:
        uri = str(config.tracking.uri)
        init_source = collecting(problems, locate_init_source, config.model.init_from, Path.cwd(), uri)
    return Review(plan, source, problems, strategy, init_source)


def data_facts(source) -> DataFacts:
    """What the loaded data shows the resolver: the model's inputs that are strings (after the preprocess)."""
    try:
        strings = source.string_inputs()
    except Exception:  # a preprocess that fails on the first examples is refused by the loader's own check
        strings = ()
    return DataFacts(string_inputs=strings)


def _with_data_facts(config, env, plan: Plan, problems: list, facts: DataFacts | None) -> Plan:
    """The Plan decided again with what the data shows, where it shows something: `auto` keeps off what the model
    cannot run. The new decisions' refusals join `problems` (those of the first resolve are there already); a
    changed precision's dtype policy is set before the model is built."""
    if facts is None or facts == NO_FACTS:
        return plan
    decided, violations = resolve_all(config, env, facts)
    problems.extend(v for v in violations if v not in problems)
    if decided.precision.policy != plan.precision.policy:
        use_policy(decided.precision.policy)
    return decided


def decided_again(config, prepared, plan: Plan, **model_facts) -> Plan:
    """The Plan decided again with what the built model shows (`model_facts`: DataFacts fields), for the data
    `prepared` holds: the rules, the sharding and the schedule (XLA's drop_remainder changes the steps); the
    records added before the build (the tuning, the continuation, the trial) kept. A refusal is a ConfigError."""
    facts = replace(data_facts(prepared.source), **model_facts)
    decided, problems = resolve_all(config, prepared.env, facts)
    raise_if_any(problems)
    if decided.precision.policy != plan.precision.policy:
        use_policy(decided.precision.policy)
    source = prepared.source
    decided, num_train = decide_sharding(decided, source.train_shards, source.num_train)
    decided = schedule(config, decided, num_train, source.num_val, source.num_test)
    raise_if_any(check_optimizer(config, decided, []))
    for record in plan.records:
        if not decided.has(type(record)):
            decided = decided.with_record(record)
    prepared.plan = decided
    return decided


def collecting(problems: list, check, *args):
    """`check(*args)`, with a ConfigError's violations added to `problems` (then None)."""
    try:
        return check(*args)
    except ConfigError as err:
        problems.extend(err.violations)
        return None


def load_data(config):
    """The dataset, its labels checked against the task (a loader that takes `task` makes labels for it)."""
    from launcher.train.registry import DATASETS

    task = config.task.name.value
    load = DATASETS.get(config.dataset.name).load
    with float32_policy():  # a loader's preprocessing layers run in the data pipeline, in float32 (see runtime)
        with_task = "task" in inspect.signature(load).parameters
        source = load(config.dataset, task=task) if with_task else load(config.dataset)
    num_classes = int(getattr(config.dataset, "num_classes", 0) or 0)
    heads = {name: head.name.value for name, head in config.task.heads.items()}  # output name -> task name
    return fit_to_task(source, task, num_classes, config.task.pad_id, heads=heads or None)


def check_optimizer(config, plan, found: list[Violation]) -> list[Violation]:
    """The optimizer's and the schedule's arguments against their classes (Keras's or yours); a part the resolver
    refused already (`found`) is not refused twice."""
    from launcher.train.optimizers import optimizer_problems

    refused = {_part(v.key) for v in found if v.key.startswith("optimizer.")}
    return [v for v in optimizer_problems(config, plan) if _part(v.key) not in refused]


def _part(key: str) -> str:
    """The optimizer's (name, params) or the schedule's (schedule, schedule_params) part of a key."""
    return "schedule" if key.startswith("optimizer.schedule") else "optimizer"


def check_model(config, source) -> None:
    from launcher.train.registry import MODELS

    MODELS.get(config.model.name).check(config.model, source)
