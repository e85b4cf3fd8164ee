"""One launch, start to finish: the runner's named steps and the hooks around the engine.

`launch` is the Hydra task (exit codes, outcome.json); `runner` resolves, restores, starts
tracking, fits and finishes; `hooks/` holds one hook per job (checkpoints, best model, metrics,
preemption, profiling, utilisation); `checkpoint` and `checkpoint_policy` save and restore;
`params` says what a run logs as params and tags; `profiling` and `utilization` measure.

May import: every stage below it (`config`, `plan`, `train`, `tracking`) and the leaf modules.
Never `launcher.sweep`.
"""
