"""A training run that is one trial of an hparams_search study: it opens its trial and says so in the Plan.

The search sweeper gives the job `sweep.trial`, `sweep.study` and `sweep.study_name`, and stores on the study the
pruner and objective it searches by; the run reads them back from there, so the trial prunes by the same rule
whichever machine it runs on.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.config.errors import ConfigError
from launcher.config.samplers import STUDY_OBJECTIVES, STUDY_PRUNER, make_pruner, prunes
from launcher.config.schema import SweepConfig
from launcher.config.study_storage import open_storage, shown
from launcher.plan.decisions import TrialPlan


@dataclass
class Trial:
    """The study's trial this run reports to: `report(value, step)`, `should_prune()`."""

    number: int
    objective: str | None  # None: a multi-objective study (Optuna prunes single-objective ones only)
    pruning: bool
    handle: object  # optuna.trial.Trial
    closed: bool = False  # the study ended the trial meanwhile (a shared study's, its sweeper silent too long)

    def report(self, value: float, step: int) -> None:
        from optuna.exceptions import UpdateFinishedTrialError

        if self.closed:
            return
        try:
            self.handle.report(value, step)
        except UpdateFinishedTrialError:
            self.closed = True
            print(
                f"Trial {self.number} was ended by its study meanwhile (its sweeper went silent and another runs it "
                "again): this run trains on without reporting.",
                flush=True,
            )

    def should_prune(self) -> bool:
        return self.pruning and not self.closed and self.handle.should_prune()


def open_trial(sweep: SweepConfig, val_every_steps: int | None, multi_worker: bool) -> tuple[Trial, TrialPlan] | None:
    """The trial `sweep` names, and its Plan record; None when this run is no trial. ConfigError when the study
    or the trial cannot be found."""
    if sweep.trial is None or not sweep.study:
        return None
    import optuna

    where = f"study {sweep.study_name!r} in {shown(sweep.study)}"
    try:
        storage = open_storage(sweep.study)
        study_id = storage.get_study_id_from_name(sweep.study_name)
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, int(sweep.trial))
    except KeyError as missing:
        raise ConfigError.single(
            "sweep.trial",
            sweep.trial,
            f"a trial of {where} ({missing})",
            "sweep.* is set by hparams_search for its jobs: run the search (-m hparams_search=...), not one job",
        ) from None
    stored = storage.get_study_user_attrs(study_id)
    spec = stored.get(STUDY_PRUNER) or {"name": "none"}
    objectives = stored.get(STUDY_OBJECTIVES) or []
    study = optuna.load_study(study_name=sweep.study_name, storage=storage, pruner=make_pruner(spec))
    objective = objectives[0] if len(objectives) == 1 else None
    pruning = prunes(spec) and objective is not None and not multi_worker
    trial = Trial(int(sweep.trial), objective, pruning, optuna.trial.Trial(study, trial_id))
    when = f"every {val_every_steps} global steps" if val_every_steps else "every epoch"
    if objective is None:
        reports = f"nothing during training (a study of {len(objectives)} objectives: Optuna prunes one only)"
    else:
        reports = f"{objective} {when} to the study"
        if pruning:
            arguments = ", ".join(f"{k}={v}" for k, v in spec.items() if k != "name")
            reports += f"; stops when its {spec['name']} pruner ({arguments or 'defaults'}) says so"
        elif multi_worker and prunes(spec):
            reports += "; never pruned: the workers of a multi-worker trial could not agree on the step"
        else:
            reports += "; no pruner"
    step = "global step" if val_every_steps else "epochs done"
    plan = TrialPlan.of(
        trial=(f"{trial.number} of {where}", "set by the search sweeper for this job"),
        reports=(reports, f"reported at each validation, its step = {step}"),
    )
    return trial, plan
