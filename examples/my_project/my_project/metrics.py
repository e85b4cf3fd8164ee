"""Balanced accuracy: the mean of the per-class recalls (fair when one class is rarer)."""

import keras
from keras import ops


class BalancedAccuracy(keras.metrics.Metric):
    """Counts per class, so replicas and workers sum their counts before the ratio is taken."""

    def __init__(self, num_classes: int = 2, name: str = "balanced_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.num_classes = num_classes
        self.hits = self.add_variable(shape=(num_classes,), initializer="zeros", name="hits")
        self.seen = self.add_variable(shape=(num_classes,), initializer="zeros", name="seen")

    def update_state(self, y_true, y_pred, sample_weight=None):
        labels = ops.one_hot(ops.cast(ops.reshape(y_true, (-1,)), "int32"), self.num_classes)
        right = ops.cast(
            ops.equal(ops.argmax(y_pred, axis=-1), ops.cast(ops.reshape(y_true, (-1,)), "int64")), "float32"
        )
        self.hits.assign_add(ops.sum(labels * right[:, None], axis=0))
        self.seen.assign_add(ops.sum(labels, axis=0))

    def result(self):
        present = ops.cast(self.seen > 0, "float32")
        recall = self.hits / ops.maximum(self.seen, 1.0)
        return ops.sum(recall * present) / ops.maximum(ops.sum(present), 1.0)
