"""MLflow, for a launch and for a sweep: one run's client, the store's URI, a reachability check.

Its own package because both a launch (`launcher.launch`) and a sweep (`launcher.sweep`) track, and
they never import each other. Writes leave the step loop through a queue and survive an outage in a spool.

Modules:
    client: MLflow's client as the launcher calls it: retried on a locked SQLite store
    delivery: writes leave the step loop through a queue one thread delivers, through any outage
    held: the points a continued run already holds, so each (metric, step) is logged once
    links: where a person opens what was logged: MLflow UI addresses for a run, experiment, sweep
    new_store: a new local SQLite store made whole in one go, without a disk sync per schema migration
    spool: what an outage left undelivered, kept in the run dir until it can be delivered
    succession: which MLflow run a launch writes to when its run dir already had one
    sync: `python -m launcher.tracking.sync <run dir>`: deliver what a tracking outage left behind
    tensorboard: `tracking.tensorboard=true`: the run's scalars as a TensorBoard event log too
    tracker: one MLflow run for a launch, a sweep's parent or a doctor: opened, written, ended
    uri: where a run is tracked: the store's URI made absolute, checked, credentials hidden
    writes: the writes a run sends to MLflow, as typed records, each one JSON line in the spool

May import: MLflow, `launcher.config`, `launcher.files` and the standard library. Never TensorFlow at
import (`tensorboard` imports it inside its functions, only when asked for).
"""
