"""What a person can set, and how a wrong setting is reported.

`schema` holds the structured configs Hydra composes into (every field documented where it is
declared), `bounds` the plain range checks the resolver walks, `errors` the `ConfigError` that
lists every problem with its fix, `models`, `precisions` and `strategies` the tables of model kinds,
precisions and distribution strategies (what each is; the resolver, the runtime and the launchers ask them).

May import: Hydra, OmegaConf and the standard library. Never TensorFlow, never another
launcher package: every other stage imports this one.
"""
