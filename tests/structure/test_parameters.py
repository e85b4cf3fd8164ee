"""The training launch's steps share one object (`launcher.launch.context.LaunchContext`) instead of passing the same
group of objects from step to step: no function in `launcher/launch/` takes more than a handful of parameters.

Pure reading of the tree (no imports of the launcher), so a broken tree is reported, not crashed on.
"""

from __future__ import annotations

import ast
from pathlib import Path

from support.config import ROOT

LAUNCH = ROOT / "launcher" / "launch"
MAX_PARAMETERS = 6


def parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """Every parameter a caller can pass (positional, keyword-only, *args, **kwargs), without self and cls."""
    args = function.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [f"*{args.vararg.arg}"] if args.vararg else []
    names += [f"**{args.kwarg.arg}"] if args.kwarg else []
    return [n for n in names if n not in ("self", "cls")]


def too_many(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line name(parameters)` of each function in `path` over MAX_PARAMETERS."""
    tree = ast.parse(path.read_text())
    functions = (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
    return [
        f"{path.relative_to(root)}:{f.lineno} {f.name}({', '.join(names)})"
        for f in functions
        if len(names := parameters(f)) > MAX_PARAMETERS
    ]


def test_no_function_in_the_launch_takes_more_than_six_parameters():
    long = [line for path in sorted(LAUNCH.rglob("*.py")) for line in too_many(path)]
    assert not long, "\n".join(long)


def test_the_count_sees_keyword_only_and_star_parameters_and_skips_self(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "class A:\n    def six(self, a, b, c, d, e, f): ...\n    def seven(self, a, b, *args, c, d, e, **kw): ...\n"
    )
    assert too_many(module, tmp_path) == ["m.py:3 seven(a, b, c, d, e, *args, **kw)"]
