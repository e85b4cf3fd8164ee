"""One training launch of the CLI in a run dir, start to finish: the shell, the launch's named steps, the hooks.

A launch is one start of `python -m launcher` in a run dir; the run is what it trains and tracks (its run dir
and its MLflow run), which a later launch may resume. `shell` is the one shell every mode runs in;
`training` names a training launch's steps in order, each in its own module; `hooks/` holds one hook per job.
Beside it: `inference` (eval, predict), `export` (the files the trained model becomes) and `supervise` (the
processes around a training).

Modules:
    agree: multi-worker agreement: the same Plan before tracking, the same weights after training
    building: the build step: model, optimizer, metrics in the strategy scope; init_from, freeze
    checkpoint_index: TensorFlow's checkpoint index, rebuilt from the checkpoint files when lost or garbled
    checkpoint_policy: when to save: the checkpoint save rule as pure arithmetic on the position
    checkpointer: checkpoints a run can bet on: exact resume, keep-N, best model, verified restores
    context: what the launch steps share: the config, the Plan, what each step found (`LaunchContext`)
    curves: the run's curves (loss and metrics by epoch, train and val) as curves.png, in MLflow too
    faults: test-only fault injection: stop or break a run at one exact point
    done: the Done block a training ends with: the best epoch, the exports, the run id and how to serve it
    finished: a finished run launched again with the same settings: nothing to train or export, no TensorFlow
    find_run: a trained run found by its name, run dir or MLflow run id; or the newest finished
    finish: the finish step: exports, final weights compared, the test split, the summary
    init_source: where `model.init_from` points, found before anything is built
    lock: one launch per run dir: a second launch on the same dir is refused
    mfu: model FLOPs utilisation: achieved training FLOP/s as a fraction of the matmul peak
    mlflow_record: what MLflow's views need beyond params and metrics: the data as dataset inputs
    mlflow_run: the start-tracking step: the checkpoint's MLflow run continued, or a new one
    params: what a launch tells MLflow about itself: its name, params and tags
    preflight: the prepare step: probe, resolve, start the runtime, load the data, schedule
    profiler: trace a window of training steps with TensorFlow's profiler, say where the time went
    remote: `checkpoint.directory=s3://...` (any fsspec URL): checkpoints that outlive the machine
    restore: the restore step: resume from the run's checkpoints where the Plan says
    review: every check of a config and its data before anything is written, in one list
    run_dirs: where a launch's run dir is (eval, predict: inside the run read); explain and refusals leave none
    shell: the one shell around every mode run in a run dir (lock, logs, exit codes, outcome.json)
    step_timing: the child process of `tune=auto`: every candidate step built and timed
    stopping: what may stop a fit before its end: signals, the numerics guard, each stop's `Ending`
    train_mode: `mode=train`: one launch in its run dir, inside the shell
    training: one training launch in named steps: prepare, build, restore, agree, track, fit, finish
    trial: a training run that is one trial of an hparams_search study
    tuning: `tune=auto`: time the steps the `auto` settings allow on this model and machine
    hooks/: the hooks the engine calls around its steps, one job each, and the list a fit uses

May import: every stage below it (`config`, `plan`, `train`, `tracking`, `export`, `supervise`),
`launcher.forkserver` and the leaf modules (`contract`, `files`, `console`, `outcome`, `background`, `dirlock`).
Never `launcher.sweep`, `launcher.inference` or `launcher.doctor`.
"""
