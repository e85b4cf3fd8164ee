"""Hooks the engine calls around its steps, one job each (see `launcher.contract.Hook`).

Each module holds one hook, constructed with the few things it needs; `assembly.hooks_for` builds a fit's
ordered list from the config and the Plan (adding a hook: a module here and a line there).

Modules:
    assembly: the hook list of one fit, in the order their work must happen at an epoch end
    best_model: tracks the best epoch by a monitored metric: a `best/` checkpoint and `best.keras`
    budget: `train.max_time`: a launch's training-time budget
    callback_state: EarlyStopping's and ReduceLROnPlateau's state carried across a resume
    checkpoint: saves a checkpoint when the save rule says so, or when a stop was requested
    history: keeps every epoch's logs, so metrics lost to a kill can be re-logged
    metrics: sends each epoch's metrics to MLflow in one batch, after the epoch's checkpoint
    preemption: SIGTERM / SIGINT (and Slurm's SIGUSR1) stop training at the next step, after a save
    profiling: traces a window of steps with TensorFlow's profiler; reports after training
    pruning: hparams_search pruning: report the objective to the trial; stop when it is pruned
    step_metrics: per-step curves in MLflow: `step/*` metrics by global step
    utilization: adds model FLOPs utilisation and time to first step to the epoch metrics

May import: `launcher.contract`, `launcher.plan` and `launcher.launch` modules (and `launcher.train.engine`
inside a function); TensorFlow only where a hook touches it (saving, exporting, tracing), inside
functions, never at module load.
"""
