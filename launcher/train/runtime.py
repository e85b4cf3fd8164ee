"""Process-wide TensorFlow setup, done once, before the TF runtime starts."""

from __future__ import annotations

import collections
import contextlib
import random

import numpy as np

from launcher.config.strategies import STRATEGIES
from launcher.console import quiet_stderr
from launcher.train.cluster_watchdog import joining


def configure(plan, seed: int, deterministic: bool):
    """Logical devices, the strategy, seeds, determinism and the dtype policy, in that order.

    The strategy is created right after the devices: MultiWorkerMirroredStrategy
    must exist before any other TensorFlow op runs. Returns the strategy.
    """
    import keras
    import tensorflow as tf

    split_cpu(plan.strategy.logical_cpus)
    strategy = make_strategy(plan)
    _check_float16_kernels()
    reseed(seed)
    if deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.mixed_precision.set_global_policy(plan.precision.policy)
    return strategy


def reseed(seed: int) -> None:
    """Python's, NumPy's and Keras's (TensorFlow's) random generators from `seed`."""
    import keras

    keras.utils.set_random_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def layer_name_counters() -> dict[str, int]:
    """Keras's counters behind auto-named layers (`dense`, `dense_1`...), copied: put back before a model is built
    again, its layers get the names a model built once gets (model.freeze and init_from match by name)."""
    return dict(_name_uids())


def restore_layer_name_counters(saved: dict[str, int]) -> None:
    uids = _name_uids()
    uids.clear()
    uids.update(saved)


def _name_uids():

    from keras.src.backend.common import global_state  # where keras.src.utils.naming keeps them (Keras 3)

    return global_state.get_global_attribute(
        "object_name_uids", default=collections.defaultdict(int), set_to_default=True
    )


def use_policy(policy: str) -> None:
    """The Keras dtype policy every layer built from now on takes (the Plan's, decided again once the data showed
    string inputs)."""
    import keras

    keras.mixed_precision.set_global_policy(policy)


@contextlib.contextmanager
def float32_policy():
    """The float32 policy while a loader runs: the preprocessing layers it builds and adapts (Normalization,
    StringLookup, FeatureSpace) run in the data pipeline, not in the model, and Keras adapts them in float32
    (under mixed_bfloat16, FeatureSpace.adapt and Normalization.adapt on a tf.data fail: cannot compute AddV2)."""
    import keras

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("float32")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def _check_float16_kernels() -> None:
    """oneDNN checks once per process, at the first float16 op, whether this CPU computes float16 natively, and on
    most CPUs logs at ERROR level that it falls back to Eigen: expected (the Plan says float16 has no fast path
    here), not an error, and it landed in the middle of the doctor's report. The check runs here, after the
    strategy exists (no op may run before a multi-worker one), in the quiet window that replays what it hid if
    anything fails."""
    import tensorflow as tf

    with quiet_stderr():
        tf.ones((1,), tf.float16)


def make_strategy(plan):
    """The tf.distribute object for the Plan's strategy, made by the builder its table entry names."""
    kind = plan.strategy.kind
    if kind not in STRATEGIES:
        raise ValueError(f"unknown strategy {kind!r}")
    return BUILDERS[STRATEGIES[kind].builder](plan)


def _current(plan):
    """No wrapping: TensorFlow's default strategy on the one device."""
    import tensorflow as tf

    return tf.distribute.get_strategy()


def _one_device(plan):
    import tensorflow as tf

    return tf.distribute.OneDeviceStrategy(plan.strategy.devices[0])


def _mirrored(plan):
    import tensorflow as tf

    devices = plan.strategy.devices
    on_cpu = all("cpu" in d.lower() for d in devices)
    # NCCL is GPU-only; on logical CPUs reduce through one device.
    ops = tf.distribute.ReductionToOneDevice() if on_cpu else None
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=ops)


def _multi_worker(plan):
    """MultiWorkerMirroredStrategy over the Plan's cluster, with the Plan's collective implementation.

    Creating it starts this worker's gRPC server and blocks until every peer has joined; TensorFlow
    waits without bound for a peer that never comes, so a watchdog stops the process after
    `strategy.connect_timeout` seconds naming the peers that do not answer.
    """
    import tensorflow as tf

    workers, index = plan.cluster.workers, plan.cluster.task_index
    spec = tf.train.ClusterSpec({"worker": workers})
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        spec, task_type="worker", task_id=index, rpc_layer="grpc"
    )
    implementation = tf.distribute.experimental.CommunicationImplementation[plan.cluster.communication.upper()]
    options = tf.distribute.experimental.CommunicationOptions(implementation=implementation)
    with joining(workers, index, plan.cluster.connect_timeout):
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver, communication_options=options)


# `launcher.config.strategies` names each strategy's builder here (`Strategy.builder`).
BUILDERS = {"current": _current, "one_device": _one_device, "mirrored": _mirrored, "multi_worker": _multi_worker}


def split_cpu(count: int) -> None:
    """Present the CPU as `count` logical devices (MirroredStrategy without GPUs)."""
    if count <= 1:
        return
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    wanted = [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) == count:
        return
    try:
        tf.config.set_logical_device_configuration(cpu, wanted)
    except RuntimeError as err:
        raise RuntimeError(
            f"Cannot split the CPU into {count} logical devices: the TensorFlow runtime already "
            "started in this process. Run each job in its own process."
        ) from err
