"""The runnable pages' text (README.md, docs/*.md): blocks marked runnable, the files a page shows, and its commands
in the chains that run them (a command naming an earlier run runs after it). Read by tests/e2e/test_docs.py and
tests/e2e/test_gallery.py."""

from __future__ import annotations

import re
import shlex

MARK = "<!-- runnable -->"
FILE = re.compile(r"<!-- file: (\S+) -->\s*\n```[^\n]*\n(.*?)\n```", re.S)


def marked_blocks(text: str, mark: str) -> list[str]:
    """The content of each fenced block right after `mark`."""
    return [match.group(1) for match in re.finditer(re.escape(mark) + r"\s*\n```[^\n]*\n(.*?)\n```", text, re.S)]


def runnable_blocks(text: str, mark: str = MARK) -> list[list[str]]:
    """The commands of each block marked runnable (comments and line continuations handled)."""
    blocks = []
    for block in marked_blocks(text, mark):
        joined = block.replace("\\\n", " ")
        lines = [shlex.split(line, comments=True) for line in joined.splitlines()]
        blocks.append([" ".join(words) for words in lines if words])
    return blocks


def page_files(text: str) -> dict[str, str]:
    """The files a page shows: path -> content, as the block holds it."""
    return {path: body + "\n" for path, body in FILE.findall(text)}


def commands(page) -> list[str]:
    return [command for block in runnable_blocks(page.read_text()) for command in block]


def chains(page) -> list[list[str]]:
    """The page's commands, each alone, except that one naming an earlier run (eval.run, model.init_from) joins that
    run's chain."""
    found: list[list[str]] = []
    by_name: dict[str, list[str]] = {}
    for command in commands(page):
        words = shlex.split(command)
        wanted = next((w.split("=", 1)[1] for w in words if w.startswith(("eval.run=", "model.init_from="))), None)
        chain = by_name.get(wanted) if wanted else None
        if chain is None:
            chain = []
            found.append(chain)
        chain.append(command)
        named = next((w.split("=", 1)[1] for w in words if w.startswith("name=")), None)
        if named:
            by_name[named] = chain
    return found
