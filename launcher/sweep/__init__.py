"""Hydra multirun into MLflow: a parent run per sweep, a fresh process per job, a summary.

Modules:
    callback: the sweep's parent MLflow run: opened before the first job, summarised after the last
    champion: the registry after a sweep: the `champion` alias goes to the best trial's version if it beats the holder
    job: one sweep job: a fresh `python -m launcher` process, recorded as a child run
    search_report: the search's report on its study: best trials, importances, plots, counts
    search: the launcher's hyper-parameter search: a Hydra sweeper on Optuna
    shared: one search pulled by several sweepers: the shared study names the sweep, its parent run, its summariser
    space: a search space over any config key: parsed, checked, sampled by an Optuna trial
    summary: the sweep's comparison artifacts on the parent run: a table (CSV, Markdown) and plots

May import: `launcher.config`, `launcher.tracking`, `launcher.forkserver` (a job's process),
`launcher.files`, `launcher.contract`, `launcher.console`, `launcher.outcome`, Hydra, MLflow and Optuna.
Never TensorFlow (a test checks it) and never `launcher.launch`.
"""
