"""Checkpoints a run can bet on: exact resume, keep-N, best model, verified restores.

A checkpoint holds the model, the optimizer (slots, iterations, loss-scale
state) and the position: epoch, step inside the epoch and global step. Each
TF checkpoint `ckpt-<global step>` gets a sidecar `ckpt-<step>.json`, written
atomically *after* the TF files, with the epoch history, best-metric and
early-stopping state and the MLflow run id. A checkpoint without its sidecar
was interrupted while being written and is never resumed from.

When to save is `checkpoint_policy.SavePolicy`; `hooks.checkpoint.CheckpointHook` applies it.

Multi-worker, as TensorFlow requires: every worker saves (the save may read variables through
collectives), only the chief into the real directory; the others save into a temporary directory
of their own, removed right after. Every worker resumes from the chief's checkpoints, so the
directory must be readable by all of them (`checkpoint.directory` on a shared filesystem).
"""

from __future__ import annotations

import os
import shutil
import sys
from contextlib import contextmanager, suppress
from pathlib import Path

from launcher.config.errors import ConfigError, Violation
from launcher.contract import CHECKPOINT_WRITE, EXIT_FAILED, FAILED, Ending, Position, StopContext
from launcher.files import read_json, write_json_atomic
from launcher.launch import checkpoint_index
from launcher.launch.faults import fault_point
from launcher.launch.lock import CHECKPOINTS_LOCK_FILE

STATE_FILE = "launcher_state.json"
FIX_FRESH = "checkpoint.resume=never to start fresh in this run dir, or a new hydra.run.dir"


def set_aside(directory: Path) -> None:
    """resume=never in a dir that has checkpoints: move them aside, never delete them."""
    kept = [p for p in directory.iterdir() if p.name != CHECKPOINTS_LOCK_FILE] if directory.exists() else []
    if not kept:
        return  # nothing there but this launch's own lock
    aside, index = directory.with_name(f"{directory.name}.replaced"), 1
    while aside.exists():
        aside, index = directory.with_name(f"{directory.name}.replaced{index}"), index + 1
    aside.mkdir()
    for entry in kept:  # the lock stays: this launch holds the directory
        shutil.move(str(entry), str(aside / entry.name))
    print(f"WARNING: checkpoint.resume=never: previous checkpoints moved to {aside}", file=sys.stderr, flush=True)


def check_writable(directory: Path) -> None:
    """Refuse before training when checkpoints cannot be written at all (read-only, no permission, full). The probe
    file is this process's own: local workers share the directory and probe it at the same moment (with one name,
    one worker's unlink removed the other's file and that worker was refused)."""
    probe = directory / f".write-test-{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"0" * 4096)
        probe.unlink()
    except OSError as err:
        with suppress(OSError):
            probe.unlink(missing_ok=True)
        raise ConfigError.single(
            "hydra.run.dir",
            str(directory),
            f"a writable checkpoint directory ({err.strerror or err})",
            "make it writable or free space on it, give the launch another name= / hydra.run.dir=, "
            "or checkpoint=off to train without checkpoints",
        ) from None


def owner_problem(directory: Path, run_dir: Path) -> ConfigError | None:
    """A checkpoint directory that holds another run's checkpoints (two run names given one
    `checkpoint.directory`): resuming them would continue that run, and its MLflow run, under this one's name.
    A run is known by its run dir's name (`name=`), so the same run continued on another machine, or from a moved
    folder, is still itself."""
    state = read_json(directory / STATE_FILE, {})
    owner = state.get("run_dir")
    if not owner or Path(owner).name == Path(run_dir).name:
        return None
    return ConfigError.single(
        "checkpoint.directory",
        str(directory),
        f"a checkpoint directory of this run ({Path(run_dir).resolve()}): it holds the checkpoints of run {owner} "
        f"(MLflow run {state.get('mlflow_run_id') or 'none'})",
        "give each run its own directory (checkpoint.directory=/shared/checkpoints/${name}), continue that run "
        f"(hydra.run.dir={owner}), or checkpoint.resume=never to set its checkpoints aside and start this run there",
    )


def worker_temp_dir(directory: Path, worker: int) -> Path:
    """Where a non-chief worker's saves go (and are removed from)."""
    return directory / f".worker{worker}-temp"


class Checkpointer:
    """The run's checkpoints: saves (the model, the optimizer with its slots, the loss scale, the position) with
    a sidecar of the hooks' state, restores the newest complete one, verifies the first save restores.

    Multi-worker: every worker saves (TensorFlow needs them all), the chief into the real directory, the others
    into a temporary one of their own removed after each save; everyone restores the chief's."""

    def __init__(self, checkpoint_config, directory: Path, built, model_config: dict, worker: int = 0, mirror=None):
        """`mirror`: a `remote.RemoteCheckpoints` the chief uploads every complete save to (None: local only)."""
        import tensorflow as tf

        self.checkpoint_config = checkpoint_config
        self.directory = directory
        self.mirror = mirror if worker == 0 else None
        self.worker = worker
        self.is_chief = worker == 0
        self.built = built
        self.model_config = model_config
        self.verified = False
        with built.strategy.scope():
            self.counters = {
                name: tf.Variable(0, dtype=tf.int64, trainable=False, name=name)
                for name in ("epoch", "step_in_epoch", "global_step")
            }
        self.checkpoint = tf.train.Checkpoint(model=built.model, optimizer=built.optimizer, **self.counters)
        if self.is_chief and (repaired := checkpoint_index.repair(directory)):  # before the manager reads it
            self._warn(repaired)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, str(directory), max_to_keep=checkpoint_config.max_to_keep, checkpoint_name="ckpt"
        )
        self.best_dir = directory / "best"
        self.best_manager = tf.train.CheckpointManager(self.checkpoint, str(self.best_dir), max_to_keep=1)
        if not self.is_chief:
            self.temp_dir = worker_temp_dir(directory, worker)
            shutil.rmtree(self.temp_dir, ignore_errors=True)  # left by a worker killed mid-save

    # -------------------------------------------------------------- state

    @property
    def state_path(self) -> Path:
        return self.directory / STATE_FILE

    def previous_state(self) -> dict:
        return read_json(self.state_path, {})

    def record(self, mlflow_run_id: str | None, layout: dict | None = None, run_dir: Path | None = None) -> None:
        """Remember the model config, MLflow run, layout (strategy, replicas, batch) and run dir of this run: the
        directory is this run's, and another run's launch is refused in it (`owner_problem`)."""
        if not self.is_chief:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        state = {"model": self.model_config, "mlflow_run_id": mlflow_run_id, "layout": layout}
        if run_dir is not None:
            state["run_dir"] = str(Path(run_dir).resolve())
        write_json_atomic(self.state_path, state)
        self._upload("state", lambda m: m.push_file(self.state_path))

    # ------------------------------------------------------------- saving

    def save(self, position: Position, extra: dict) -> str:
        """Write checkpoint + sidecar; the sidecar last, so its presence marks completeness.

        A failed write (disk full, read-only, permissions) removes its partial files and raises
        CheckpointWriteError: the checkpoints already on disk stay as they were.
        """
        self._set_counters(position)
        if not self.is_chief:
            return self._save_and_discard(position, verify=True)
        with self._writing(self.directory, position):
            path = self.manager.save(checkpoint_number=position.global_step)
            fault_point("before_sidecar", position.global_step)
            sidecar = {"position": vars(position).copy(), **extra}
            write_json_atomic(Path(f"{path}.json"), sidecar)
        self._drop_orphan_sidecars()
        self._upload(Path(path).name, lambda m: m.push_checkpoint(path, self.manager.checkpoints))
        fault_point("after_save", position.global_step)
        if not self.verified and self.checkpoint_config.verify_restore:
            self.verify(path)
        return path

    def _save_and_discard(self, position: Position, verify: bool) -> str:
        """A non-chief worker's part of a save: the same collectives as the chief's (its first save is verified
        as the chief's is), then the files go."""
        import tensorflow as tf

        manager = tf.train.CheckpointManager(self.checkpoint, str(self.temp_dir), max_to_keep=1)
        path = manager.save(checkpoint_number=position.global_step)
        if verify and not self.verified and self.checkpoint_config.verify_restore:
            self.verify(path)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        return path

    def _set_counters(self, position: Position) -> None:
        for name, variable in self.counters.items():
            variable.assign(getattr(position, name))

    def _drop_orphan_sidecars(self) -> None:
        """Sidecars of checkpoints the manager rotated out (keep-N) go with them."""
        kept = {f"{Path(p).name}.json" for p in self.manager.checkpoints}
        for sidecar in self.directory.glob("ckpt-*.json"):
            if sidecar.name not in kept:
                sidecar.unlink(missing_ok=True)

    def save_best(self, position: Position) -> str:
        self._set_counters(position)
        if not self.is_chief:
            return self._save_and_discard(position, verify=False)
        with self._writing(self.best_dir, position):
            path = self.best_manager.save(checkpoint_number=position.global_step)
        self._upload(f"best/{Path(path).name}", lambda m: m.push_best(path))
        return path

    def _upload(self, what: str, push) -> None:
        """`push(mirror)` when checkpoints are mirrored to an object store; a failed upload stops the run (the
        local copy is complete; a rerun resumes from it and uploads again at its next save)."""
        if self.mirror is None:
            return
        try:
            push(self.mirror)
        except Exception as err:  # the store's own error types differ per library
            raise CheckpointUploadError(
                f"{what} could not be uploaded to {self.mirror.url}: {str(err)[:300]}. The local copy in "
                f"{self.directory} is complete; re-run the same command to resume from it."
            ) from err

    @contextmanager
    def _writing(self, directory: Path, position: Position):
        import tensorflow as tf

        try:
            yield
        except (OSError, tf.errors.OpError) as err:
            step = position.global_step
            for partial in [*directory.glob(f"ckpt-{step}_temp*"), *directory.glob(f"ckpt-{step}.*")]:
                shutil.rmtree(partial, ignore_errors=True) if partial.is_dir() else partial.unlink(missing_ok=True)
            newest = self.manager.latest_checkpoint
            raise CheckpointWriteError(
                f"Checkpoint at global step {step} ({position}) could not be written to {directory}: "
                f"{_reason(err)}.\n"
                f"The run stopped at this save. Checkpoints already on disk are intact "
                f"(newest: {newest or 'none'}).\n"
                f"fix: free space on (or make writable) {directory}, or lower checkpoint.max_to_keep; then re-run "
                f"the same command to resume" + (f" from {Path(newest).name}." if newest else ".")
            ) from None

    def verify(self, path: str) -> None:
        """Restore the first checkpoint into fresh objects: a broken restore path shows now, not after a crash."""
        import tensorflow as tf

        fresh = self.built.rebuild()
        with self.built.strategy.scope():
            counters = {name: tf.Variable(0, dtype=tf.int64, name=name) for name in self.counters}
        probe = tf.train.Checkpoint(model=fresh.model, optimizer=fresh.optimizer, **counters)
        try:
            probe.restore(path).assert_consumed()
        except (AssertionError, ValueError) as err:  # unmatched objects, or a variable of another shape
            raise CheckpointVerifyError(
                f"the first checkpoint ({path}) does not restore into a freshly built model and optimizer: "
                f"{str(err)[:500]}"
            ) from err
        self.verified = True

    # ----------------------------------------------------------- resuming

    def restore(self) -> tuple[Position, dict] | None:
        """Restore the newest complete checkpoint; None when there is nothing to resume."""
        resume = str(self.checkpoint_config.resume)
        if resume == "never":
            return None
        if resume != "auto":
            return self._restore_explicit(resume)
        candidates = list(reversed(self.manager.checkpoints))
        if candidates:
            self._check_same_model(candidates[0])
        for path in candidates:
            sidecar = self._read_sidecar(path)
            if sidecar is None:
                self._warn(
                    f"checkpoint {path} has no sidecar {Path(path).name}.json (interrupted while "
                    "being written); falling back to the previous one"
                )
                continue
            try:
                self._restore_into_model(path, resume)
            except _Corrupt as err:
                self._warn(f"checkpoint {path} is unreadable ({err}); falling back to the previous one")
                continue
            return Position(**sidecar["position"]), sidecar
        if candidates:
            self._warn("no usable checkpoint found; starting from scratch")
        return None

    def _restore_explicit(self, resume: str) -> tuple[Position, dict]:
        if not Path(f"{resume}.index").exists():
            raise ConfigError.single(
                "checkpoint.resume",
                resume,
                "auto, never, or an existing checkpoint prefix such as <run dir>/checkpoints/ckpt-30",
                "checkpoint.resume=auto",
            )
        sidecar = self._read_sidecar(resume)
        if sidecar is None:
            raise ConfigError.single(
                "checkpoint.resume",
                resume,
                f"a complete checkpoint (its sidecar {resume}.json is missing)",
                "checkpoint.resume=auto to pick the newest complete one",
            )
        try:
            self._restore_into_model(resume, resume)
        except _Corrupt as err:
            raise ConfigError.single("checkpoint.resume", resume, f"a readable checkpoint ({err})", FIX_FRESH) from None
        return Position(**sidecar["position"]), sidecar

    def _restore_into_model(self, path: str, resume: str) -> None:
        import tensorflow as tf

        try:
            self.checkpoint.restore(path).assert_existing_objects_matched()
        except (AssertionError, ValueError) as err:
            raise ConfigError.single(
                "checkpoint.resume",
                resume,
                f"a checkpoint written by the same model config (restoring {path} failed: "
                f"{str(err).splitlines()[0][:200]})",
                FIX_FRESH,
            ) from None
        except (tf.errors.OpError, IndexError, OSError) as err:  # truncated / overwritten files
            raise _Corrupt(str(err).splitlines()[0][:200]) from None

    def _read_sidecar(self, path: str) -> dict | None:
        """The sidecar's state; None when missing (the checkpoint was interrupted mid-write)."""
        return read_json(Path(f"{path}.json"))

    def _check_same_model(self, path: str) -> None:
        saved = self.previous_state().get("model")
        if saved is None or saved == self.model_config:
            return
        if saved.get("name") != self.model_config.get("name"):
            raise ConfigError.single(
                "model",
                self.model_config.get("name"),
                f"{saved.get('name')!r}, the model of the checkpoint being resumed ({path})",
                FIX_FRESH,
            )
        raise ConfigError(
            [
                Violation(
                    f"model.{key}",
                    self.model_config.get(key),
                    f"{saved.get(key)!r} as in the checkpoint being resumed ({path})",
                    FIX_FRESH,
                )
                for key in sorted(set(saved) | set(self.model_config))
                if saved.get(key) != self.model_config.get(key)
            ]
        )

    @staticmethod
    def _warn(message: str) -> None:
        print(f"WARNING: {message}", file=sys.stderr, flush=True)


class _Corrupt(Exception):
    pass


class CheckpointVerifyError(RuntimeError):
    """The first save does not restore into fresh objects: resuming from it would fail after a crash."""


class CheckpointUploadError(RuntimeError):
    """An upload to checkpoint.directory's object store failed: a training failure train.max_restarts may retry
    (a network is often back a minute later), unlike a full local disk."""


class CheckpointWriteError(RuntimeError):
    """A save failed: the run stops with this message instead of training on without checkpoints."""

    def ending(self, context: StopContext) -> Ending:
        """FAILED, not restarted (the disk is the person's to fix); the message says it all: no traceback."""
        error = f"CheckpointWriteError: {self}"
        return Ending(
            FAILED,
            EXIT_FAILED,
            error=error,
            failure=CHECKPOINT_WRITE,
            tags={"error": error},
            message=f"\n{self}\nThe MLflow run is marked FAILED.",
            to_stderr=True,
        )


def _reason(err: Exception) -> str:
    """The OS's words (`No space left on device`), not TensorFlow's op wrapper around them."""
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text.split("; ")[-1].split(" [Op:")[0].strip() if ";" in text else text
