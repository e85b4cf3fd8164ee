"""The resolver's rules, one module per concern; each returns its section of the Plan.

A rule takes the config, the environment, the `Findings` it reports violations and warnings to, and
the sections it depends on as arguments: a rule cannot run before the ones it needs, and reads their
decisions as typed attributes. `launcher.plan.resolve` composes them.

Modules:
    batch: global, per-replica and micro batches, and the learning rate scaled with the global batch
    batch_norm: whether a run has the steps BatchNormalization's moving averages need to settle
    export: what the trained model is exported as: the formats checked, keras always among them
    findings: what rules report besides decisions: violations (refused) and warnings (said)
    fine_tune: fine-tuning's keys: what is frozen, when it trains again, where weights come from
    layer_swaps: model.layer_swaps: whether stock layers are swapped for fused kernels that compute the same
    loss_scale: loss scaling where gradients underflow, and which loss-scale optimizer applies it
    numerics: non-finite steps, determinism, gradient clipping and the weights' average
    optimizer: which optimizer and learning-rate schedule a run uses, checked against the tables
    precision: which precision (and so which dtype policy) the run uses; `auto` asks the hardware
    profile: the profiler's trace window, when one is asked for
    step: how a step runs: whether XLA compiles it, where, and how the optimizer applies its update
    strategy: which tf.distribute strategy, on which devices, and the cluster this process joins
    task: the task decides the loss, the metrics and the head; names that cannot work are refused

May import: `launcher.config` (its schema and tables), `launcher.plan` (decisions, environment, cluster)
and the standard library. Pure: no TensorFlow, no files.
"""
