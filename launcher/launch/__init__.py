"""One launch, start to finish: the runner's named steps and the hooks around the engine.

`shell` is the one shell every mode runs in (lock, log setup, exit codes, the outcome record); `launch`
is mode=train and `evaluate` mode=eval / mode=predict inside it; `runner` names a launch's steps in order,
each in its own module: `preflight` (prepare), `building`, `restore`, `agree`, `mlflow_run` (start
tracking), `stopping` (what may stop the fit; each stop's `Ending` is in `launcher.contract`) and `finish`
(with `export`); `hooks/` holds one hook per job (checkpoints, best model, metrics, preemption, profiling,
utilisation) and `hooks.assembly.hooks_for` builds a fit's list; `checkpoint` and `checkpoint_policy` save
and restore; `params` says what a run logs as params and tags; `profiling` and `utilization` measure.

May import: every stage below it (`config`, `plan`, `train`, `tracking`) and the leaf modules
(`contract`, `files`, `console`, `outcome`).
Never `launcher.sweep`.
"""
