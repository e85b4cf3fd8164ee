"""One launch of the CLI in a run dir, start to finish: the shell, the training launch's named steps, the hooks.

A launch is one start of `python -m launcher` in a run dir; the run is what it trains and tracks (its run dir
and its MLflow run), which a later launch may resume. `shell` is the one shell every mode runs in;
`training` names a training launch's steps in order, each in its own module; `hooks/` holds one hook per job.

Modules:
    agree: multi-worker agreement: the same Plan before tracking, the same weights after training
    batch_files: `mode=predict eval.input=`: a folder of images or TFRecord files, a chunk at a time
    batch_inputs: `mode=predict eval.input=`: a CSV or Parquet table, checked against the served inputs, in chunks
    batch_outputs: `mode=predict eval.input=`: predictions written a chunk at a time (Parquet, CSV) or npz
    batch_predict: `mode=predict eval.input=`: a file or folder through the run's SavedModel, in bounded memory
    building: the build step: model, optimizer, metrics in the strategy scope; init_from, freeze
    checkpoint_index: TensorFlow's checkpoint index, rebuilt from the checkpoint files when lost or garbled
    checkpoint_policy: when to save: the checkpoint save rule as pure arithmetic on the position
    checkpointer: checkpoints a run can bet on: exact resume, keep-N, best model, verified restores
    evaluate: `mode=eval` and `mode=predict`: a trained run's model on a split, logged beside it
    export: the trained model as files: `model.keras`, `best.keras`, serving formats, MLflow model
    faults: test-only fault injection: stop or break a run at one exact point
    find_run: a trained run found by its name, run dir or MLflow run id; or the newest finished
    finish: the finish step: exports, final weights compared, the test split, the summary
    init_source: where `model.init_from` points, found before anything is built
    local_workers: `strategy.local_workers=N`: a multi-worker job on this machine, from one command
    lock: one launch per run dir: a second launch on the same dir is refused
    mfu: model FLOPs utilisation: achieved training FLOP/s as a fraction of the matmul peak
    mlflow_model: the MLflow model: the SavedModel's served function as a pyfunc, signature, raw example
    mlflow_record: what MLflow's views need beyond params and metrics: the data as dataset inputs
    mlflow_run: the start-tracking step: the checkpoint's MLflow run continued, or a new one
    params: what a launch tells MLflow about itself: its name, params and tags
    preflight: the prepare step: probe, resolve, start the runtime, load the data, schedule
    profiler: trace a window of training steps with TensorFlow's profiler, say where the time went
    remote: `checkpoint.directory=s3://...` (any fsspec URL): checkpoints that outlive the machine
    restarts: `train.max_restarts=N`: a failed training restarts from its newest checkpoint
    restore: the restore step: resume from the run's checkpoints where the Plan says
    review: every check of a config and its data before anything is written, in one list
    served_pyfunc: the code MLflow runs to serve a run's SavedModel (never imports the launcher)
    serving: exports a server or a device runs: a TensorFlow SavedModel and a TFLite file
    shell: the one shell around every mode run in a run dir (lock, logs, exit codes, outcome.json)
    slurm: Slurm's time-limit warning turned into a requeue (`strategy.slurm_requeue=true`)
    step_timing: the child process of `tune=auto`: every candidate step built and timed
    stopping: what may stop a fit before its end: signals, the numerics guard, each stop's `Ending`
    train_mode: `mode=train`: one launch in its run dir, inside the shell
    training: one training launch in named steps: prepare, build, restore, agree, track, fit, finish
    trial: a training run that is one trial of an hparams_search study
    tuning: `tune=auto`: time the steps the `auto` settings allow on this model and machine
    hooks/: the hooks the engine calls around its steps, one job each, and the list a fit uses

May import: every stage below it (`config`, `plan`, `train`, `tracking`), `launcher.forkserver` (to start
workers and restarts) and the leaf modules (`contract`, `files`, `console`, `outcome`).
Never `launcher.sweep`.
"""
