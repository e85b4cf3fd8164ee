"""The docs cannot drift from the CLI: every command in a block marked runnable is run, on a tiny config.

A fenced block preceded by `<!-- runnable -->` in README.md or docs/*.md is runnable. Its
`python -m launcher ...` lines run in order, in one temporary directory per page (so a later command
can use a run an earlier one made), each with overrides that shrink it to one short epoch.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest
from conftest import ROOT

MARK = "<!-- runnable -->"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# One epoch of two steps, one validation step, a small MLP where the command does not choose the model.
SHRINK = [
    "train.epochs=1",
    "train.max_steps_per_epoch=2",
    "train.max_validation_steps=1",
    "tracking.system_metrics=false",
    "tracking.log_model=false",
]


def runnable_blocks(text: str) -> list[list[str]]:
    """The commands of each block marked runnable (comments and line continuations handled)."""
    blocks = []
    for match in re.finditer(re.escape(MARK) + r"\s*\n```[^\n]*\n(.*?)\n```", text, re.S):
        joined = match.group(1).replace("\\\n", " ")
        lines = [shlex.split(line, comments=True) for line in joined.splitlines()]
        blocks.append([" ".join(words) for words in lines if words])
    return blocks


def commands(page) -> list[str]:
    return [command for block in runnable_blocks(page.read_text()) for command in block]


def test_the_readme_and_the_pages_have_runnable_blocks_and_they_are_launcher_commands():
    found = {page.name: commands(page) for page in PAGES}
    assert len(found["README.md"]) >= 5 and found["your_model.md"], found
    for page, listed in found.items():
        for command in listed:
            assert command.startswith("python -m launcher "), (page, command)


def test_a_block_without_the_mark_is_not_run_and_continuations_are_joined():
    text = (
        "```bash\npython -m launcher not_run=1\n```\n" + MARK + "\n```bash\n"
        "python -m launcher a=1   # comment\npython -m launcher \\\n    b=2\n```\n"
    )
    assert runnable_blocks(text) == [["python -m launcher a=1", "python -m launcher b=2"]]


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if commands(p)], ids=lambda p: p.name)
def test_every_runnable_command_of_a_page_runs(page, tmp_path):
    for command in commands(page):
        args = shlex.split(command)[3:]  # after "python -m launcher"
        done = subprocess.run(
            [sys.executable, "-m", "launcher", *args, *SHRINK],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"{page.name}: {command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        assert "Plan:" in done.stdout or "mode=" in command, command
