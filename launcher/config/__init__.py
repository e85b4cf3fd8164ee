"""What a person can set, and how a wrong setting is reported.

`schema` holds the structured configs Hydra composes into (every field documented where it is
declared), `bounds` the plain range checks the resolver walks, `errors` the `ConfigError` that
lists every problem with its fix, `models` and `precisions` the tables of model kinds and precisions
(what each is; the resolver asks them).

May import: Hydra, OmegaConf and the standard library. Never TensorFlow, never another
launcher package: every other stage imports this one.
"""
