"""`checkpoint.directory=s3://bucket/prefix` (or gs://, any fsspec URL): checkpoints that outlive the machine.

TensorFlow 2.21 has no S3 file system of its own, so TensorFlow writes each checkpoint into a local staging
directory (`<run dir>/checkpoints`), and every complete save is then uploaded through fsspec (s3fs, gcsfs):
the TensorFlow files first, the sidecar `ckpt-<step>.json` last. Its presence marks a complete checkpoint
remotely as it does on disk, so an upload cut short is never taken for a checkpoint. A launch whose local
directory lacks the newest complete remote checkpoint (a new machine, an empty disk) downloads the complete
ones first and resumes as from disk. Checkpoints rotated out locally (keep-N) are deleted remotely too.

Credentials come from the environment the library reads (AWS_ACCESS_KEY_ID, AWS_PROFILE, AWS_ENDPOINT_URL
for an S3-compatible server...; GOOGLE_APPLICATION_CREDENTIALS, STORAGE_EMULATOR_HOST for GCS); nothing here logs
them, and URLs with embedded credentials are redacted before they reach the Plan, params or tags.
"""

from __future__ import annotations

import os
from pathlib import Path

import fsspec

from launcher.config.errors import ConfigError
from launcher.launch.checkpoint_index import SIDECAR, complete_steps, write_index
from launcher.launch.faults import fault_point

STATE_FILES = ("launcher_state.json",)
FIX = 'set checkpoint.directory to a bucket you can write (credentials from the usual environment), or "" for local'


def is_remote(directory: str) -> bool:
    """An fsspec URL with a protocol other than a local file's."""
    protocol, sep, _ = str(directory).partition("://")
    return bool(sep) and protocol not in ("file", "local")


class RemoteCheckpoints:
    """The remote copy of a run's checkpoint directory, mirrored from the local staging directory."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        try:
            self.fs, self.root = fsspec.core.url_to_fs(self.url, skip_instance_cache=True)
        except (ImportError, ValueError) as err:
            raise ConfigError.single(
                "checkpoint.directory",
                url,
                f"an object store URL fsspec can open ({err})",
                "pip install 'launcher[s3]' (s3://) or 'launcher[gcs]' (gs://), or checkpoint.directory=\"\" for local",
            ) from None

    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def check_writable(self) -> None:
        """Refuse before training when the store cannot be written (no bucket, no credentials, no network)."""
        probe = self._path(f".write-test-{os.getpid()}")  # this process's own: local workers probe at once
        try:
            self.fs.pipe(probe, b"0")
            self.fs.rm(probe)
        except Exception as err:  # the store's own error types differ per library
            raise ConfigError.single(
                "checkpoint.directory", self.url, f"an object store location this process can write ({err})", FIX
            ) from None

    def set_aside(self) -> str | None:
        """checkpoint.resume=never: the remote checkpoints move to `<url>.replaced[N]`, never deleted."""
        self.fs.invalidate_cache()
        files = self.fs.find(self.root)
        if not files:
            return None
        aside, index = f"{self.root}.replaced", 1
        while self.fs.find(aside):
            aside, index = f"{self.root}.replaced{index}", index + 1
        for file in files:  # object stores have no rename: copy every object, then delete the originals
            self.fs.copy(file, aside + file[len(self.root) :])
        self.fs.rm(files)
        return aside

    # ------------------------------------------------------------- reading

    def complete_steps(self) -> list[int]:
        """Global steps of the complete remote checkpoints (sidecar present), oldest first."""
        self.fs.invalidate_cache()
        try:
            names = [Path(p).name for p in self.fs.ls(self.root, detail=False)]
        except FileNotFoundError:
            return []
        steps = {int(m.group(1)) for n in names if (m := SIDECAR.match(n))}
        return sorted(s for s in steps if f"ckpt-{s}.index" in names)

    def pull(self, local: Path) -> list[int]:
        """Download the complete remote checkpoints the local directory lacks, when the remote's newest is newer
        than the local's; the local manager state is written to list them. Returns the steps downloaded."""
        remote = self.complete_steps()
        here = complete_steps(local)
        if not remote or (here and max(here) >= max(remote)):
            return []
        local.mkdir(parents=True, exist_ok=True)
        wanted = [s for s in remote if s not in here]
        for step in wanted:
            prefix = f"ckpt-{step}"
            files = [Path(p).name for p in self.fs.glob(self._path(f"{prefix}.*"))]
            for name in sorted(files, key=lambda n: n.endswith(".json")):  # the sidecar last here too
                self.fs.get(self._path(name), str(local / name))
        for name in STATE_FILES:
            if self.fs.exists(self._path(name)):
                self.fs.get(self._path(name), str(local / name))
        write_index(local, sorted(set(here) | set(wanted)))
        return wanted

    # ------------------------------------------------------------- writing

    def push_checkpoint(self, path: str, kept: list[str]) -> None:
        """Upload one complete local checkpoint (`<dir>/ckpt-N`), the sidecar last; delete the remote
        checkpoints the local manager no longer keeps."""
        local = Path(path)
        data = sorted(local.parent.glob(f"{local.name}.*"))
        sidecar = local.parent / f"{local.name}.json"
        for file in data:
            if file != sidecar:
                self.fs.put_file(str(file), self._path(file.name))
        fault_point("before_remote_sidecar", int(local.name.split("-")[-1]))
        self.fs.put_file(str(sidecar), self._path(sidecar.name))
        self._prune({Path(p).name for p in kept})

    def push_file(self, file: Path, name: str | None = None) -> None:
        """A file as it is (the run's state, an exported model)."""
        self.fs.put_file(str(file), self._path(name or file.name))

    def push_folder(self, folder: Path) -> None:
        """A folder as it is (an exported SavedModel), file by file under the folder's name; a SavedModel's graph
        file last, so a copy cut short never looks complete (its variables missing)."""
        files = sorted((p for p in folder.rglob("*") if p.is_file()), key=lambda p: (p.name == "saved_model.pb", p))
        for file in files:
            self.push_file(file, "/".join((folder.name, *file.relative_to(folder).parts)))

    def push_best(self, path: str) -> None:
        """The best checkpoint (`<dir>/best/ckpt-N`): only the newest is kept, under best/."""
        local = Path(path)
        for stale in self.fs.glob(self._path("best", "ckpt-*")):
            if not Path(stale).name.startswith(f"{local.name}."):
                self.fs.rm(stale)
        for file in sorted(local.parent.glob(f"{local.name}.*")):
            self.fs.put_file(str(file), self._path("best", file.name))

    def _prune(self, kept: set[str]) -> None:
        for step in self.complete_steps():
            if f"ckpt-{step}" not in kept:  # the sidecar first: a half-deleted checkpoint is an incomplete one
                self.fs.rm(self._path(f"ckpt-{step}.json"))
                self.fs.rm(self.fs.glob(self._path(f"ckpt-{step}.*")))
