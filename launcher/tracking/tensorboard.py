"""`tracking.tensorboard=true`: the run's MLflow scalars written as a TensorBoard event log too.

For people whose habit is TensorBoard: the same epoch metrics (x = epoch) and `step/*` curves (x = global step)
the hooks send MLflow, and the Plan as text, in `<run dir>/tensorboard` (open it with
`tensorboard --logdir <run dir>/tensorboard`); logged to the MLflow run as the `tensorboard` artifact when the
run ends. It wraps the run's tracker, so every hook that logs a metric feeds both.
"""

from __future__ import annotations

from pathlib import Path

TENSORBOARD_DIR = "tensorboard"


class TensorBoardMirror:
    """A run tracker that also writes each metric point as a TensorBoard scalar (everything else is the
    wrapped tracker's)."""

    def __init__(self, tracker, run_dir: Path, plan_text: str):
        import tensorflow as tf

        self._tracker = tracker
        self.directory = run_dir / TENSORBOARD_DIR
        self._writer = tf.summary.create_file_writer(str(self.directory))
        with self._writer.as_default():
            tf.summary.text("plan", plan_text.replace("\n", "  \n"), step=0)  # Markdown line breaks
        self._writer.flush()

    def __getattr__(self, name):  # run_id, ui_hint, set_tags, log_artifacts...: the MLflow run's
        return getattr(self._tracker, name)

    def log_metrics(self, metrics: dict, step: int) -> None:
        import tensorflow as tf

        metrics = self._tracker.held.new(metrics, step)  # a point the continued run holds: in neither log again
        self._tracker.log_metrics(metrics, step=step)
        with self._writer.as_default():
            for name, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):  # NaN too, as MLflow keeps it
                    tf.summary.scalar(name, float(value), step=int(step))

    def flush(self) -> None:
        self._writer.flush()
        self._tracker.flush()

    def end(self, status: str = "FINISHED") -> None:
        self._writer.close()
        if self._tracker.run_id is not None:
            self._tracker.log_artifacts(self.directory, TENSORBOARD_DIR)
        self._tracker.end(status)
