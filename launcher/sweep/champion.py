"""The registry after a sweep: the `champion` alias of `tracking.register_model` goes to the sweep's best trial's
version, but only when that version beats the one holding the alias now.

Why: each trial of a sweep with `tracking.register_model=<name>` registers a version, so a sweep leaves a dozen
versions and nothing says which one to serve. Teams serve `models:/<name>@champion`; an alias that any later sweep
took, better or not, would let a worse model into serving. So the alias moves only on evidence: the same metric
(the sweep's objective), read from each version's run, compared in the sweep's direction.

The rules, in order:
- no `tracking.register_model`: nothing happens (no tag either);
- several objectives (a multi-objective search): no single best, the alias stays (the reason says so);
- candidates are the trials that FINISHED, were not pruned, logged the objective and registered a READY version of
  the model (a trial's latest version); none: the alias stays;
- no version holds the alias: the best candidate takes it;
- the best candidate holds it already: it stays;
- the holder's run has no value of the objective (a different task, a run registered by hand, a deleted run):
  the alias stays, and the reason says how to move it by hand (a move is a decision the numbers cannot make);
- else the best candidate takes it only when strictly better (a tie keeps the holder); a holder chosen by another
  objective is compared on this one all the same (its run logged it), and the reason says so.

The parent run records the decision (`registry.champion`: "<name> v<version>" holding the alias after it, or
"none"; `registry.champion_reason`), the version that takes the alias gets `champion.objective` and
`champion.sweep_run_id` tags, and the console gets one line. A registry failure is a warning and a reason tag,
never the sweep's other results lost.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from launcher.config.tasks import objective
from launcher.sweep.summary import best_run, children, is_pruned, minimises, sweep_goal
from launcher.tracking.client import TAG_LIMIT, with_retry

ALIAS = "champion"
TAG_CHAMPION = "registry.champion"
TAG_REASON = "registry.champion_reason"
VERSION_OBJECTIVE = "champion.objective"  # on the version that took the alias: the metric it won on
VERSION_SWEEP = "champion.sweep_run_id"  # and the sweep (parent run) that gave it


@dataclass(frozen=True)
class Goal:
    """What the champion is chosen by: the registered model's name and the sweep's objective(s), direction(s)."""

    model: str
    objectives: tuple[str, ...]
    directions: tuple[str, ...]


def goal_of(node) -> Goal | None:
    """The sweep's goal from its config (as `search.Search` and the summary read it), None without
    `tracking.register_model`."""
    from omegaconf import OmegaConf

    name = str(node.tracking.get("register_model") or "")
    if not name:
        return None
    sweeper = node.hydra.sweeper

    def plain(value):
        return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value

    found, directions = sweep_goal(plain(sweeper.get("objectives")), plain(sweeper.get("direction")), objective(node))
    return Goal(name, tuple(found), tuple(directions))


@dataclass(frozen=True)
class Entry:
    """A registered version, its run and the run's final value of the objective (None: it has none)."""

    version: str
    run_id: str
    value: float | None
    chosen_by: str | None = None  # the objective it took the alias on, when the launcher gave it the alias


@dataclass(frozen=True)
class Decision:
    """Who holds the alias after the sweep, whether it moved, and why."""

    model: str
    holder: str | None
    moved: bool
    reason: str

    def tags(self) -> dict[str, str]:
        return {
            TAG_CHAMPION: f"{self.model} v{self.holder}" if self.holder else "none",
            TAG_REASON: self.reason[:TAG_LIMIT],
        }

    def line(self) -> str:
        """The console's one line."""
        moved = f" -> v{self.holder}" if self.moved else ""
        return f"Registry: {self.model}@{ALIAS}{moved}: {self.reason}"


def _pair(a: float, b: float) -> tuple[str, str]:
    """Two values shown with the fewest digits that tell them apart."""
    for digits in (4, 6, 10):
        shown = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if shown[0] != shown[1]:
            return shown
    return repr(a), repr(b)


def _stays(holder: Entry | None) -> str:
    return f"the alias stays on v{holder.version}" if holder else "no version holds the alias"


def choose(
    goal: Goal, candidates: list[Entry], holder: Entry | None, unregistered_better: str | None = None
) -> Decision:
    """The rules of the module's docstring, on what the registry holds: `candidates` (this sweep's trials' versions,
    in the summary's order: ties go to the first, as the summary's best does), `holder` (the version holding the
    alias now). `unregistered_better`: a trial that scored better but registered no version (said, never chosen)."""
    name, kept = goal.model, holder.version if holder else None
    if len(goal.objectives) > 1:
        return Decision(
            name,
            kept,
            False,
            f"not chosen: a search of {len(goal.objectives)} objectives ({', '.join(goal.objectives)}) has no single "
            f"best (its Pareto front: the sweep.pareto_front tag); {_stays(holder)}",
        )
    metric, direction = goal.objectives[0], goal.directions[0]
    lower = minimises(metric, direction)
    if not candidates:
        why = f"no trial that finished (not pruned) with {metric} registered a version of {name}"
        return Decision(name, kept, False, f"not chosen: {why}; {_stays(holder)}")
    best = (min if lower else max)(candidates, key=lambda e: e.value)
    skipped = f"; {unregistered_better} scored better but registered no version" if unregistered_better else ""
    ours = f"{metric} {best.value:.4g} of v{best.version} (run {best.run_id})"
    if holder is None:
        return Decision(name, best.version, True, f"{ours}; no version held the alias{skipped}")
    if holder.version == best.version:
        return Decision(name, kept, False, f"kept v{kept}: the sweep's best, {ours}, holds the alias already{skipped}")
    other = f" (v{kept} took the alias on {holder.chosen_by})" if holder.chosen_by not in (None, metric) else ""
    if holder.value is None:
        return Decision(
            name,
            kept,
            False,
            f"kept v{kept}: its run ({holder.run_id or 'none'}) has no {metric} to compare with the sweep's best, "
            f"{ours}{other}; to serve v{best.version}, move the alias by hand: "
            f"MlflowClient().set_registered_model_alias({name!r}, {ALIAS!r}, {best.version!r}){skipped}",
        )
    new, old = _pair(best.value, holder.value)
    theirs = f"{old} of v{kept} (run {holder.run_id}){other}"
    if best.value < holder.value if lower else best.value > holder.value:
        sign = "<" if lower else ">"
        return Decision(name, best.version, True, f"{metric} {new} (run {best.run_id}) {sign} {theirs}{skipped}")
    word = "below" if lower else "above"
    return Decision(
        name,
        kept,
        False,
        f"kept v{kept}: the sweep's best, v{best.version} (run {best.run_id}), has {metric} {new}, not {word} "
        f"{theirs}{skipped}",
    )


def _versions(client, name: str) -> list:
    """Every version of registered model `name`, through all pages ([] when there is no such model)."""
    found, token = [], None
    while True:
        page = with_retry(client.search_model_versions, f"name='{name}'", page_token=token)
        found += list(page)
        token = page.token
        if not token:
            return found


def _holder(client, name: str, metric: str) -> Entry | None:
    """The version holding the alias now, with its run's value of `metric` (None when the run has none or is gone);
    None when no version holds it (or there is no such model)."""
    from mlflow.exceptions import MlflowException

    try:
        model = with_retry(client.get_registered_model, name)
    except MlflowException as err:
        if err.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    if ALIAS not in model.aliases:
        return None
    held = with_retry(client.get_model_version_by_alias, name, ALIAS)
    value = None
    if held.run_id:
        try:
            value = with_retry(client.get_run, held.run_id).data.metrics.get(metric)
        except MlflowException:  # the run was deleted for good: nothing to compare with
            value = None
    return Entry(str(held.version), held.run_id or "", value, (held.tags or {}).get(VERSION_OBJECTIVE))


def _candidates(client, goal: Goal, parent_run_id: str) -> tuple[list[Entry], str | None]:
    """The sweep's trials that can take the alias (finished, not pruned, with the objective and a READY version of
    the model: a trial's latest), in the summary's order; and the name of a better trial that registered none."""
    metric, direction = goal.objectives[0], goal.directions[0]
    _, runs = children(client, parent_run_id)
    latest: dict[str, str] = {}
    for version in _versions(client, goal.model):
        if version.status == "READY" and version.run_id:
            latest[version.run_id] = str(max(int(version.version), int(latest.get(version.run_id, 0))))
    scored = [r for r in runs if r.info.status == "FINISHED" and not is_pruned(r) and metric in r.data.metrics]
    candidates = [
        Entry(latest[r.info.run_id], r.info.run_id, r.data.metrics[metric]) for r in scored if r.info.run_id in latest
    ]
    top = best_run(runs, metric, direction)
    if top is None or top.info.run_id in latest or not candidates:
        return candidates, None
    pick = min if minimises(metric, direction) else max
    tie = top.data.metrics[metric] == pick(candidates, key=lambda e: e.value).value
    return candidates, None if tie else top.info.run_name


def decide(client, goal: Goal, parent_run_id: str) -> Decision:
    """Read the sweep's trials and the registry, decide (`choose`), and move the alias when the decision says so."""
    metric = goal.objectives[0]
    candidates, unregistered = _candidates(client, goal, parent_run_id) if len(goal.objectives) == 1 else ([], None)
    decision = choose(goal, candidates, _holder(client, goal.model, metric), unregistered)
    if decision.moved:
        with_retry(client.set_registered_model_alias, goal.model, ALIAS, decision.holder)
        with_retry(client.set_model_version_tag, goal.model, decision.holder, VERSION_OBJECTIVE, metric)
        with_retry(client.set_model_version_tag, goal.model, decision.holder, VERSION_SWEEP, parent_run_id)
    return decision


def crown(uri: str, parent_run_id: str, goal: Goal | None) -> str | None:
    """The champion step of a sweep's end: decide, tag the parent run, return the console line (None without
    `tracking.register_model`). Never raises: a registry that fails is a warning and a reason tag."""
    if goal is None:
        return None
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    try:
        decision = decide(client, goal, parent_run_id)
        tags, line = decision.tags(), decision.line()
    except Exception as err:  # the sweep's results stand without a champion
        why = f"{type(err).__name__}: {' '.join(str(err).strip().splitlines()[:2])[:300]}"
        tags, line = {TAG_REASON: f"failed: {why}"}, None
        print(f"WARNING: no {ALIAS} chosen for {goal.model} ({why}); the sweep's results stand.", file=sys.stderr)
    try:
        for key, value in tags.items():
            with_retry(client.set_tag, parent_run_id, key, value)
    except Exception as err:
        print(f"WARNING: the {ALIAS} decision was not tagged on the sweep's parent run ({err})", file=sys.stderr)
    return line
