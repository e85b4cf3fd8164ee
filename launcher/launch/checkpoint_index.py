"""TensorFlow's checkpoint index (`<checkpoints>/checkpoint`), read from the checkpoint files themselves.

`tf.train.CheckpointManager` lists a directory's checkpoints from that small text file alone: lost, emptied or
garbled (a copy that skipped it, a disk that filled while it was rewritten), the files beside it were ignored and
training restarted from step 0 over them, or failed with `Invalid checkpoint state`. A checkpoint is complete when
its TensorFlow index and its sidecar (`ckpt-<step>.json`, written last) are there; the index is rebuilt from
those, with a warning, before the manager reads it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

INDEX = "checkpoint"
SIDECAR = re.compile(r"ckpt-(\d+)\.json$")
LISTED = re.compile(r'^all_model_checkpoint_paths:\s*"(?:.*/)?ckpt-(\d+)"\s*$')


def complete_steps(directory: Path) -> list[int]:
    """The global steps of the complete checkpoints in `directory`, oldest first."""
    if not directory.is_dir():
        return []
    return sorted(
        int(m.group(1))
        for p in directory.glob("ckpt-*.json")
        if (m := SIDECAR.match(p.name)) and (directory / f"ckpt-{m.group(1)}.index").exists()
    )


def write_index(directory: Path, steps: list[int]) -> None:
    """TensorFlow's CheckpointManager state file (text format), listing `steps` oldest first. The manager keeps
    (and rotates) only checkpoints whose timestamp is after `last_preserved_timestamp`: each gets one."""
    now = time.time()
    lines = [f'model_checkpoint_path: "ckpt-{steps[-1]}"']
    lines += [f'all_model_checkpoint_paths: "ckpt-{s}"' for s in steps]
    lines += [f"all_model_checkpoint_timestamps: {now - len(steps) + i:.3f}" for i in range(len(steps))]
    lines.append(f"last_preserved_timestamp: {now - len(steps) - 1:.3f}")
    (directory / INDEX).write_text("\n".join(lines) + "\n")


def listed_steps(directory: Path) -> list[int] | None:
    """The steps the index lists; None when it is missing, empty or not an index."""
    try:
        text = (directory / INDEX).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.strip().startswith("model_checkpoint_path:"):
        return None
    return [int(m.group(1)) for line in text.splitlines() if (m := LISTED.match(line.strip()))]


def repair(directory: Path) -> str | None:
    """Rebuild the index when it does not list every complete checkpoint on disk; what was wrong, or None."""
    complete = complete_steps(directory)
    listed = listed_steps(directory)
    if not complete or (listed is not None and set(complete) <= set(listed)):
        return None
    if not (directory / INDEX).exists():
        what = "is missing"
    elif listed is None:
        what = "is empty or unreadable"
    else:
        what = f"lists {', '.join(f'ckpt-{s}' for s in listed) or 'nothing'}"
    write_index(directory, complete)
    return (
        f"the checkpoint index {directory / INDEX} {what}: rebuilt from the checkpoint files there "
        f"({', '.join(f'ckpt-{s}' for s in complete)})"
    )
