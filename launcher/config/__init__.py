"""What a person can set, and how a wrong setting is reported.

The schema Hydra composes into, the checks of its values, and the component tables (what each model kind,
dataset, precision, strategy, optimizer, task, export format and search sampler is): the resolver, the runtime
and the launches ask these tables instead of comparing names.

Modules:
    bounds: value ranges, declared once where each field is declared; the check walks them
    datasets: the table of the datasets the launcher knows: each one's config schema and loader module
    durations: wall-clock budgets as people write them (`2h30m`, `90s`, `1d`) or plain seconds
    errors: `ConfigError`: every violation of a config, reported at once, never as a TF traceback
    exports: the table of the formats a trained model is exported as, each saying what it writes
    help: `python -m launcher --help`: the launcher by name and the config groups to choose from
    imports: the user's components by import path (`module.path:attribute`) and installed plugins
    keys: keys a person types that the launcher does not have: refused with the key meant
    models: the table of the model kinds the launcher knows, each saying what it is
    optimizers: the table of optimizers and learning-rate schedules a config names, and what each is
    precisions: the table of the precisions the launcher knows, each saying what it is
    raised: what a person's own code raised, told in their own frames (file:line), whole and without colour codes
    run_mode: Hydra's run mode read without its second compose of the whole config (a plain run composes once)
    samplers: the hyper-parameter search's samplers and pruners by name, and how to build each
    study_storage: where an Optuna study lives (a database URL or a journal file), opened with a heartbeat
    schema: structured-config schema: every key a person can set, with its type
    strategies: the table of the distribution strategies the launcher knows, each saying what it is
    tasks: the table of what each task needs: its loss, metrics, head and labels (no TensorFlow)
    yaml_files: a config file that is not YAML, reported as `file:line:column: problem` with its fix

May import: Hydra, OmegaConf and the standard library (Optuna and SQLAlchemy only inside the functions of
`samplers` and `study_storage`). Never TensorFlow, never another launcher package: every other stage imports
this one.
"""
