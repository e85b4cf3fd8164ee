"""resolve(config, environment) -> Plan: the launcher's knowledge of what works together.

Pure: no TensorFlow, no files. The rules (`launcher.plan.rules`, one module per concern) run in the
order their inputs require: each takes the sections it depends on and returns its own, and reports
violations instead of raising, so one ConfigError lists them all.
"""

from __future__ import annotations

from launcher.config.bounds import out_of_bounds
from launcher.config.durations import duration_problems
from launcher.config.errors import Violation, raise_if_any
from launcher.config.imports import callback_problems
from launcher.config.schema import Config, PrecisionName
from launcher.config.strategies import strategy_of
from launcher.plan.data_facts import NO_FACTS, DataFacts
from launcher.plan.decisions import Plan
from launcher.plan.environment import Environment
from launcher.plan.rules.batch import decide_batch, decide_learning_rate
from launcher.plan.rules.export import decide_export
from launcher.plan.rules.findings import Findings
from launcher.plan.rules.fine_tune import check_fine_tuning
from launcher.plan.rules.layer_swaps import decide_layer_swaps
from launcher.plan.rules.loss_scale import decide_loss_scale
from launcher.plan.rules.numerics import decide_numerics
from launcher.plan.rules.optimizer import decide_optimizer
from launcher.plan.rules.precision import decide_precision
from launcher.plan.rules.profile import decide_profile
from launcher.plan.rules.step import decide_step
from launcher.plan.rules.strategy import decide_strategy
from launcher.plan.rules.task import decide_task


def resolve(config: Config, env: Environment, facts: DataFacts = NO_FACTS) -> Plan:
    """Check the combination and decide everything; raise ConfigError listing every problem."""
    plan, violations = resolve_all(config, env, facts)
    raise_if_any(violations)
    return plan


def resolve_all(config: Config, env: Environment, facts: DataFacts = NO_FACTS) -> tuple[Plan, list[Violation]]:
    """Every rule: the Plan and every violation found; `facts`: what the loaded data shows (none before it loads).

    The Plan is complete even when something is refused (a refused value is decided as asked, its reason
    says so), so the launch still checks the data against it and one message lists every problem.
    """
    found = Findings()
    precision = decide_precision(config, env, found, facts)
    strategy, cluster = decide_strategy(config, env, found)
    step = decide_step(config, env, found, precision, strategy, facts)
    optimizer = decide_optimizer(config, found)
    loss_scale = decide_loss_scale(config, found, precision, strategy, step)
    batch = decide_batch(config, found, strategy, step)
    learning_rate = decide_learning_rate(config, found, batch)
    numerics = decide_numerics(config, found, strategy)
    task = decide_task(config, found, precision)
    export = decide_export(config, found)
    profile = decide_profile(config, cluster)
    layer_swaps = decide_layer_swaps(config, env, found, strategy)
    check_fine_tuning(config, found)
    found.violations.extend(out_of_bounds(config))
    found.violations.extend(duration_problems(config))
    found.violations.extend(callback_problems(config.train.callbacks))
    plan = Plan(
        precision=precision,
        strategy=strategy,
        cluster=cluster,
        step=step,
        optimizer=optimizer,
        loss_scale=loss_scale,
        batch=batch,
        learning_rate=learning_rate,
        numerics=numerics,
        task=task,
        export=export,
        profile=profile,
        layer_swaps=layer_swaps,
        warnings=tuple(found.warnings),
    )
    return plan, found.violations


def wants_measurements(config: Config) -> bool:
    """precision=auto and xla=auto decide by this machine's measured matmul rates.

    Not under a strategy of several processes (multi_worker): workers on different machines (or measuring
    under different load) could decide differently, and every worker must run the same step. They decide by flags.
    """
    if not strategy_of(config.strategy.kind).single_process:
        return False
    return config.precision.name == PrecisionName.auto or str(config.xla).strip().lower() == "auto"
