"""Build inside the strategy scope and train: runtime setup, build, engine, loss scaling, data.

`runtime` configures devices, strategy, seeds and the dtype policy before the TF runtime starts;
`build` creates every variable (model, optimizer, loss-scale state) inside `strategy.scope()`;
`engine` owns the training loop for every strategy, precision and XLA mode, and drives the
hooks through `launcher.contract`; `steps` compiles the step kind's replica steps and chunk loops,
`step_stats` is the stats vector they return; `loss_scale`, `fused_update` (optimizers updating through
fused TensorFlow kernels), `data`, `schedules`, `callbacks` and `model_io` are the pieces it is
built from.

`registry` maps model and dataset names to their builders.

May import: TensorFlow, Keras, `launcher.config`, `launcher.plan` (the Plan's types), `launcher.contract`,
`launcher.console`.
Never `launcher.launch` or `launcher.sweep`; it takes the Plan as data.
"""
