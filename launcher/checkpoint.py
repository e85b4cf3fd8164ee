"""Checkpoints of model, optimizer (slots, iterations, loss scale) and the epoch counter."""

from __future__ import annotations

from pathlib import Path


class Checkpointer:
    """Saves every `interval_epochs` epochs, keeps `max_to_keep`, resumes from the latest."""

    def __init__(self, cfg, directory: Path, built):
        import tensorflow as tf

        self.cfg = cfg
        self.directory = directory
        with built.strategy.scope():
            self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.checkpoint = tf.train.Checkpoint(model=built.model, optimizer=built.optimizer, epoch=self.epoch)
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(directory), max_to_keep=cfg.max_to_keep)

    def restore(self) -> int:
        """Return the epoch to start from (0 when there is nothing to resume)."""
        from launcher.errors import ConfigError

        resume = str(self.cfg.resume)
        if resume == "never":
            return 0
        path = self.manager.latest_checkpoint if resume == "auto" else resume
        if resume != "auto" and not Path(path + ".index").exists() and not Path(path).exists():
            raise ConfigError.single(
                "checkpoint.resume", resume, "auto, never, or an existing checkpoint prefix (…/ckpt-N)",
                "checkpoint.resume=auto",
            )
        if not path:
            return 0
        self.checkpoint.restore(path).assert_existing_objects_matched()
        return int(self.epoch.numpy())

    def maybe_save(self, epoch: int) -> str | None:
        interval = self.cfg.interval_epochs
        if not interval or (epoch + 1) % interval:
            return None
        self.epoch.assign(epoch + 1)
        return self.manager.save(checkpoint_number=epoch + 1)
