"""launcher: a declarative training launcher for TensorFlow / Keras 3, tracked in MLflow.

A launch is one start of the CLI in a run dir (`launcher.launch`); a run is what it trains and tracks: its run
dir and its MLflow run.

Modules:
    __main__: `python -m launcher [overrides]`: compose with Hydra, then one launch or one sweep job
    background: threads the launcher starts beside its work, ended before the process is
    console: what the console shows: TensorFlow's, absl's and MLflow's start-up noise quieted
    contract: the engine's contract: where training is, what it asks of its hooks, what it returns
    dirlock: one process per directory (a launch's run dir, a sweep's dir): a second holder is refused
    files: the files one stage leaves for another, and the two ways they are read and written
    outcome: what one process did, as a typed record (`outcome.json`), and its exit code
    config/: what a person can set, and how a wrong setting is reported
    plan/: from a config and a machine to a Plan: every decision the launcher makes, with its reason
    train/: build inside the strategy scope and train: runtime, build, engine, loss scaling, data
    export/: the trained model as files: `model.keras`, `best.keras`, SavedModel, TFLite, the MLflow model
    supervise/: the processes around a training: local workers, restarts, Slurm's requeue (no TensorFlow)
    launch/: one training launch of the CLI in a run dir, start to finish: its named steps and its hooks
    inference/: `mode=eval` and `mode=predict`: a trained run's model on a split or on files
    tracking/: MLflow for a launch and a sweep: the client, the store's URI, writes through outages
    sweep/: Hydra multirun into MLflow: a parent run per sweep, a fresh process per job, a summary
    doctor/: `mode=doctor`: short trials of a config that find why it breaks and verify the fix
    forkserver/: warm starts for the processes the launcher starts itself (jobs, workers, restarts)
"""

__version__ = "0.1.0"
