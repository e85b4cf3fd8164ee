"""`mode=doctor`: short trials of a config that find why it breaks and verify the fix.

Modules:
    diagnose: the doctor's reasoning, pure: which addition breaks the run, which overrides fix it
    doctor: the examination: environment checks, bisection, localisation, scan, verified fix
    doctor_mode: `python -m launcher mode=doctor`: examine the config, write the report, log it
    inspect: inside the model: the first non-finite value, the layers float16 cannot hold
    report: the examination as a person reads it: Markdown in the run dir, a console table, a plot
    trials: one trial: a short, untracked training of a config variant in this process

May import: `config`, `plan`, `train`, `launch` (its review, shell, numerics guard and tuning cache),
`tracking` and the leaf modules.
"""
