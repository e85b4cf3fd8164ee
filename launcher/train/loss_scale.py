"""Loss-scale optimizers: Keras's own where it works, a replica-safe one where it does not.

Keras's `LossScaleOptimizer` under a multi-replica strategy decides "finite or
not" from the first replica's *un-reduced* gradients inside a `merge_call`
(an overflow on another replica goes straight into the weights), and its
`merge_call` crashes when the step is XLA-compiled (keras#21366, #18666).
`ReplicaSafeLossScaleOptimizer` keeps Keras's public API but:

1. all-reduces each replica's finite/non-finite verdict before deciding, so an
   overflow on any replica skips the step on every replica;
2. decides in cross-replica context, outside any compiled function, and applies
   through the inner optimizer on every replica or on none: they never diverge;
3. offers a fixed mode (Keras 3 dropped `dynamic=False`) and min/max bounds.

The same concept one level up: `launcher.plan.rules.loss_scale` decides which of these a run uses and
how it scales.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

STOCK = "stock"


@keras.saving.register_keras_serializable(package="launcher")
class ReplicaSafeLossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """Drop-in `keras.optimizers.LossScaleOptimizer` that is safe across replicas and XLA.

    Args:
        inner_optimizer: the optimizer that applies the unscaled gradients.
        initial_scale: starting loss scale (the scale itself in fixed mode).
        dynamic_growth_steps: finite steps after which a dynamic scale doubles.
        dynamic: False keeps the scale constant (non-finite steps are still skipped).
        min_scale, max_scale: bounds for the dynamic scale.
    """

    def __init__(
        self,
        inner_optimizer,
        initial_scale=2.0**15,
        dynamic_growth_steps=2000,
        dynamic=True,
        min_scale=1.0,
        max_scale=2.0**24,
        name=None,
        **kwargs,
    ):
        super().__init__(
            inner_optimizer,
            initial_scale=initial_scale,
            dynamic_growth_steps=dynamic_growth_steps,
            name=name,
            **kwargs,
        )
        self.dynamic = bool(dynamic)
        self.min_scale = float(min_scale)
        self.max_scale = float(max_scale)

    # ------------------------------------------------------------ applying

    def apply(self, grads, trainable_variables=None):
        """Apply *scaled* gradients, as Keras's `LossScaleOptimizer.apply` does."""
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
            self.built = True
        variables = list(trainable_variables or self._trainable_variables)
        context = tf.distribute.get_replica_context()
        if context is None:
            raise ValueError(
                "ReplicaSafeLossScaleOptimizer.apply() must be called in a replica context "
                "(inside strategy.run), like keras.optimizers.LossScaleOptimizer.apply()."
            )
        if tf.distribute.get_strategy().num_replicas_in_sync == 1:
            self._apply_reduced(self._unscale(grads, variables), variables)
        else:
            context.merge_call(self._merge_apply, args=(list(grads), variables))

    def _unscale(self, grads, variables):
        """Divide by the scale, as Keras does: not a missing gradient, nor one that overwrites its
        variable (`overwrite_with_gradient`, Keras's float8 scaling factors)."""
        return [
            g
            if g is None or self._overwrite_variable_with_gradient(v)
            else ops.divide(g, ops.cast(self.dynamic_scale, g.dtype))
            for g, v in zip(grads, variables, strict=True)
        ]

    def _merge_apply(self, distribution, grads, variables):
        """Cross-replica: agree on one finite/non-finite verdict, then apply or skip together."""
        local_finite = distribution.extended.call_for_each_replica(
            lambda gs: tf.cast(self.check_finite(gs), tf.float32), args=(grads,)
        )
        # Every replica (and worker) gets the same count, so the verdict is shared.
        finite_count = distribution.reduce(tf.distribute.ReduceOp.SUM, local_finite, axis=None)
        finite = tf.equal(finite_count, float(distribution.num_replicas_in_sync))

        def apply_on_replicas():
            # The inner optimizer all-reduces the unscaled gradients itself.
            distribution.extended.call_for_each_replica(
                lambda gs: self._apply_finite(self._unscale(gs, variables), variables), args=(grads,)
            )

        ops.cond(finite, apply_on_replicas, self._skip_non_finite)

    def _apply_reduced(self, grads, variables):
        """One replica: unscaled gradients are the whole story."""
        finite = self.check_finite(grads)
        ops.cond(finite, lambda: self._apply_finite(grads, variables), self._skip_non_finite)

    def _apply_finite(self, grads, variables):
        self.inner_optimizer.apply(grads, variables)
        if not self.dynamic:
            return

        def grow():
            self.step_counter.assign(0)
            self.dynamic_scale.assign(ops.minimum(self.dynamic_scale * 2.0, self.max_scale))

        def count():
            self.step_counter.assign_add(1)

        ops.cond(ops.equal(self.step_counter, self.dynamic_growth_steps - 1), grow, count)

    def _skip_non_finite(self):
        if not self.dynamic:
            return
        self.step_counter.assign(0)
        self.dynamic_scale.assign(ops.maximum(self.dynamic_scale * 0.5, self.min_scale))

    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        raise NotImplementedError("stateless_apply is not supported with the TensorFlow backend.")

    # -------------------------------------------------------- serialization

    def get_config(self):
        config = super().get_config()
        config.update(dynamic=self.dynamic, min_scale=self.min_scale, max_scale=self.max_scale)
        return config


def wrap(inner, plan, loss_scale):
    """Wrap `inner` in the loss-scale optimizer the Plan chose (or return it as is)."""
    choice = plan.loss_scale.optimizer
    if choice == "none":
        return inner
    fixed = plan.loss_scale.mode == "fixed"
    initial = plan.loss_scale.value if fixed else loss_scale.initial_scale
    if choice == STOCK:
        return keras.optimizers.LossScaleOptimizer(
            inner, initial_scale=initial, dynamic_growth_steps=loss_scale.growth_interval
        )
    return ReplicaSafeLossScaleOptimizer(
        inner,
        initial_scale=initial,
        dynamic_growth_steps=loss_scale.growth_interval,
        dynamic=not fixed,
        min_scale=loss_scale.min_scale,
        max_scale=loss_scale.max_scale,
    )


def current_scale(optimizer) -> float | None:
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer) and optimizer.built:
        return float(keras.ops.convert_to_numpy(optimizer.dynamic_scale))
    return None
