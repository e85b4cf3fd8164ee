"""Where a newcomer finds things: every package says which modules it holds, a file name means one concept, every
module has a test file that names it, and no module grows past what a person reads at once.

Each check is pure reading of the tree (no imports of the launcher), so a broken tree is reported, not crashed on.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from support.config import ROOT

PACKAGE = ROOT / "launcher"
TESTS = ROOT / "tests"
MAX_LINES = 500
LONGER_ALLOWED = {"launcher/config/schema.py"}  # every key a person can set, each documented where declared
TRAINING_LAUNCH = PACKAGE / "launch" / "training.py"  # orchestration only: read top to bottom
MAP = ROOT / "docs" / "architecture.md"  # a map, not a diary


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def dotted(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def listed_modules(init: Path) -> list[str] | None:
    """The names in the docstring's `Modules:` block (one indented `name: what` line each), None without one."""
    lines = docstring(init).splitlines()
    if "Modules:" not in lines:
        return None
    names = []
    for line in lines[lines.index("Modules:") + 1 :]:
        if not line.strip():
            break
        if match := re.match(r"^    (\w+/?): ", line):
            names.append(match.group(1))
    return names


def held_modules(package: Path) -> list[str]:
    own = [p.stem for p in package.glob("*.py") if p.name != "__init__.py"]
    subpackages = [f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").exists()]
    return sorted(own + subpackages)


def test_every_package_lists_exactly_the_modules_it_holds():
    wrong = {}
    for init in sorted(PACKAGE.rglob("__init__.py")):
        listed = listed_modules(init)
        held = held_modules(init.parent)
        if listed is None or sorted(listed) != held:
            wrong[str(init.relative_to(ROOT))] = {
                "not listed": sorted(set(held) - set(listed or [])),
                "listed, not there": sorted(set(listed or []) - set(held)),
            }
    assert not wrong, wrong


def test_a_file_name_shared_by_two_modules_is_one_concept_at_two_levels_and_each_names_the_other():
    by_name = defaultdict(list)
    for path in modules():
        if path.name not in ("__init__.py", "__main__.py"):
            by_name[path.name].append(path)
    unexplained = []
    for paths in by_name.values():
        for path in paths if len(paths) > 1 else ():
            twins = [dotted(other) for other in paths if other != path]
            if not all(twin in docstring(path) for twin in twins):
                unexplained.append(f"{path.relative_to(ROOT)} does not name {twins}")
    assert not unexplained, unexplained


def names_in(test_file: Path) -> set[str]:
    """The launcher modules a test file names: in its text (a dotted path) or by importing them."""
    text = test_file.read_text()
    named = set(re.findall(r"launcher(?:\.\w+)+", text))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("launcher"):
            named |= {f"{node.module}.{alias.name}" for alias in node.names}
    return named


def test_every_module_is_named_by_at_least_one_test_file():
    # The structure checks list modules (the TF-free ones, say) without testing them: they do not count.
    testing = [path for path in TESTS.rglob("test_*.py") if "structure" not in path.relative_to(TESTS).parts]
    named = set().union(*(names_in(path) for path in testing))
    unnamed = [
        dotted(path)
        for path in modules()
        if path.name not in ("__init__.py", "__main__.py") and dotted(path) not in named
    ]
    assert not unnamed, f"modules no test file names (import them, or name them where their tests are): {unnamed}"


def test_no_module_is_longer_than_a_person_reads_at_once():
    long = {
        str(path.relative_to(ROOT)): count
        for path in modules()
        if (count := len(path.read_text().splitlines())) > MAX_LINES
        and str(path.relative_to(ROOT)) not in LONGER_ALLOWED
    }
    assert not long, long


def test_the_training_launch_is_orchestration_short_and_with_few_imports():
    source = TRAINING_LAUNCH.read_text()
    imports = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert len(source.splitlines()) <= 250
    assert len(imports) <= 20, [ast.unparse(n) for n in imports]


def test_the_architecture_page_stays_a_map():
    assert len(MAP.read_text().splitlines()) <= 200
