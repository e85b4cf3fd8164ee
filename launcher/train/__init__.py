"""Build inside the strategy scope and train: runtime setup, build, engine, loss scaling, data.

`runtime` configures the process before the TF runtime starts, `build` creates every variable inside
`strategy.scope()`, `engine` owns the training loop and drives the hooks through `launcher.contract`;
the other modules are the pieces they are built from, and the plugin API (`registry`, `model_io`,
`data`) a user's model or dataset is written against.

Modules:
    adapt: `model.adapt`: the user's preprocessing layers adapted once on the training split, read back on resume
    agreement: workers of one multi-worker job agreeing, over TensorFlow's own collectives
    batch_norm: the built model's BatchNormalization layers and their momentum, for the moving-average warning
    build: build everything that creates variables, in one place, inside strategy.scope()
    callbacks: Keras callbacks from the `train` config, standard and the user's own
    clipping: gradient clipping after the all-reduce, the same whatever the strategy
    cluster_watchdog: a bound on joining a multi-worker cluster: a watchdog kills a stuck worker
    data: DataSource: what every dataset builder returns, and the tf.data pipeline over it
    data_checks: a user's data checked before training: every problem of a file in one ConfigError
    ema: the weights' exponential moving average (`optimizer.use_ema`) for evaluation and export
    engine: one training loop for every strategy, precision and XLA mode
    example_shapes: tf.data examples of one shape tf.data does not know: read, checked, given (windows)
    fine_tune: fine-tuning on the built model: weights from a source, layers frozen, then unfrozen
    fresh_optimizer: the optimizer's state restarted at the unfreeze, its schedule read on from there
    fused_activation: keras.layers.Dense whose bias add and GELU/SiLU are one compiled float32 cluster
    fused_batch_norm: keras.layers.BatchNormalization computed by one fused kernel (FusedBatchNormV3)
    fused_update: Keras optimizers whose update is one fused TensorFlow kernel per variable
    labels: the dataset's labels against the task, before anything is built, with the fix
    layer_swaps: the built model's stock layers swapped for fused kernels that compute the same, with why
    losses: the task's loss from config: the task's own, the person's function or Loss class, with arguments
    loss_scale: loss-scale optimizers: Keras's own where it works, else a replica-safe one
    model_io: pieces every model builder shares: the input layer, the float32 output head
    numerics: what the compiled step counts about numerics, and when a run must stop
    optimizers: the configured optimizer and schedule as objects, their arguments checked
    outputs: what a model's outputs are: logits, or probabilities (it ends in softmax or sigmoid)
    preprocessing: raw example -> model input, run by the data pipeline and exported inside every model
    registry: name -> builder module for models and datasets; errors list the choices
    runtime: process-wide TensorFlow setup, done once, before the TF runtime starts
    saved_as_stock: a swapped layer class that `.keras` files name as the stock Keras class
    schedules: learning-rate schedule: linear warmup, then the configured schedule
    step_stats: the stats vector every step returns, and `Totals`, which reads it by name
    steps: the step kind's replica steps and the in-graph loops that run a chunk of them
    task_metrics: the task's metric objects from config, with arguments, named as configured (no `_1`)
    tasks: the task's loss and metrics as Keras objects, built inside the strategy scope
    user_data: `dataset=custom dataset.loader=pkg.mod:load` (or a plugin): the user's data
    user_model: `model=custom model.builder=pkg.mod:build` (or a plugin): the user's Keras model

May import: TensorFlow, Keras, `launcher.config`, `launcher.plan` (the Plan's types), `launcher.contract`,
`launcher.console`.
Never `launcher.launch` or `launcher.sweep`; it takes the Plan as data.
"""
