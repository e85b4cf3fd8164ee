"""Checkpoints of model, optimizer (slots, iterations, loss scale) and the epoch counter.

Next to the TF checkpoints, `launcher_state.json` records the model config and
the MLflow run id, so a resumed run is checked for compatibility *before* any
variable is touched and continues the same MLflow run.
"""

from __future__ import annotations

import json
from pathlib import Path

from launcher.errors import ConfigError, Violation

STATE_FILE = "launcher_state.json"


class Checkpointer:
    """Saves every `interval_epochs` epochs, keeps `max_to_keep`, resumes from the latest."""

    def __init__(self, cfg, directory: Path, built, model_config: dict):
        import tensorflow as tf

        self.cfg = cfg
        self.directory = directory
        self.model_config = model_config
        with built.strategy.scope():
            self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.checkpoint = tf.train.Checkpoint(model=built.model, optimizer=built.optimizer, epoch=self.epoch)
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(directory), max_to_keep=cfg.max_to_keep)

    @property
    def state_path(self) -> Path:
        return self.directory / STATE_FILE

    def previous_state(self) -> dict:
        try:
            return json.loads(self.state_path.read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    def record(self, mlflow_run_id: str | None) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        state = {"model": self.model_config, "mlflow_run_id": mlflow_run_id}
        self.state_path.write_text(json.dumps(state, indent=2))

    def restore(self) -> int:
        """Return the epoch to start from (0 when there is nothing to resume)."""
        resume = str(self.cfg.resume)
        if resume == "never":
            return 0
        path = self.manager.latest_checkpoint if resume == "auto" else resume
        if resume != "auto" and not Path(f"{path}.index").exists():
            raise ConfigError.single(
                "checkpoint.resume", resume,
                "auto, never, or an existing checkpoint prefix such as <run dir>/checkpoints/ckpt-3",
                "checkpoint.resume=auto",
            )
        if not path:
            return 0
        self._check_same_model(path)
        try:
            self.checkpoint.restore(path).assert_existing_objects_matched()
        except (AssertionError, ValueError) as err:
            raise ConfigError.single(
                "checkpoint.resume", resume,
                f"a checkpoint written by the same model config (restoring {path} failed: "
                f"{str(err).splitlines()[0][:200]})",
                "checkpoint.resume=never to start fresh in this run dir, or a new hydra.run.dir",
            ) from None
        return int(self.epoch.numpy())

    def _check_same_model(self, path: str) -> None:
        saved = self.previous_state().get("model")
        if saved is None or saved == self.model_config:
            return
        fix = "checkpoint.resume=never to start fresh in this run dir, or a new hydra.run.dir"
        if saved.get("name") != self.model_config.get("name"):
            raise ConfigError.single(
                "model", self.model_config.get("name"),
                f"{saved.get('name')!r}, the model of the checkpoint being resumed ({path})", fix,
            )
        violations = [
            Violation(
                f"model.{key}", self.model_config.get(key),
                f"{saved.get(key)!r} as in the checkpoint being resumed ({path})", fix,
            )
            for key in sorted(set(saved) | set(self.model_config))
            if saved.get(key) != self.model_config.get(key)
        ]
        raise ConfigError(violations)

    def maybe_save(self, epoch: int) -> str | None:
        interval = self.cfg.interval_epochs
        if not interval or (epoch + 1) % interval:
            return None
        self.epoch.assign(epoch + 1)
        return self.manager.save(checkpoint_number=epoch + 1)
