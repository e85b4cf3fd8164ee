"""The package tree reads as the data flow, and imports point one way.

config -> plan -> train -> run        (sweep beside run; leaves: contract, files, console)
"""

from __future__ import annotations

import ast
import subprocess
import sys

from conftest import ROOT

PACKAGE = ROOT / "launcher"
LEAVES = {"contract", "files", "console", "outcome"}
# What each stage may import from the launcher (besides itself).
ALLOWED = {
    "config": set(),
    "plan": {"config", "contract", "console"},
    "train": {"config", "plan", "contract", "console"},
    "tracking": {"config"},
    "run": {"config", "plan", "train", "tracking", "contract", "files", "console", "outcome"},
    "sweep": {"config", "tracking", "contract", "files", "outcome"},
    "doctor": {"config", "plan", "train", "run", "tracking", "contract", "files", "console", "outcome"},
    "__main__": {"config", "run", "sweep", "doctor"},
    **{leaf: set() for leaf in LEAVES},
    "outcome": {"files"},  # a leaf that writes through the shared JSON helpers
}
TF_FREE_MODULES = [
    "launcher.sweep.callback",
    "launcher.sweep.job",
    "launcher.sweep.summary",
    "launcher.sweep.study_storage",
    "launcher.plan.resolve",
    "launcher.plan.schedule",
    "launcher.plan.resume",
    "launcher.plan.decisions",
    "launcher.plan.precisions",
    "launcher.plan.sharding",
    "launcher.plan.environment",
    "launcher.plan.hardware",
    "launcher.config.schema",
    "launcher.config.bounds",
    "launcher.config.models",
    "launcher.config.tasks",
    "launcher.config.imports",
    "launcher.run.checkpoint_policy",
    "launcher.contract",
    "launcher.files",
    "launcher.console",
    "launcher.tracking.tracker",
    "launcher.tracking.uri",
    "launcher.run.hooks.checkpoint",
    "launcher.run.hooks.best_model",
    "launcher.run.hooks.metrics",
    "launcher.run.hooks.history",
    "launcher.run.hooks.preemption",
    "launcher.run.hooks.utilization",
    "launcher.run.hooks.profiling",
    "launcher.run.hooks.callback_state",
    "launcher.run.params",
    "launcher.train.numerics",
    "launcher.run.hooks.step_metrics",
    "launcher.doctor.diagnose",
]


def stage_of(path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def launcher_imports(path) -> set[str]:
    """The launcher stages a module imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "launcher" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_every_module_imports_only_the_stages_before_it():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__init__.py" and path.parent == PACKAGE:
            continue
        stage = stage_of(path)
        outside = launcher_imports(path) - ALLOWED[stage] - {stage}
        if outside:
            wrong.append(f"{path.relative_to(ROOT)} ({stage}) imports {sorted(outside)}")
    assert not wrong, "\n".join(wrong)


def test_every_package_says_what_it_is_for_and_what_it_may_import():
    for init in sorted(PACKAGE.glob("**/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "May import" in doc or init.parent == PACKAGE, init
        assert len(doc.splitlines()[0]) > 20, init


def test_sweep_plan_schema_and_policy_modules_never_load_tensorflow():
    """The sweep process's promise: it composes, resolves and tracks without TensorFlow."""
    code = (
        "import importlib, sys\n"
        f"for name in {TF_FREE_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras'))\n"
        "assert not loaded, loaded[:5]\n"
        "print('ok', len(sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ok")


def test_a_module_that_imports_tensorflow_is_detected():
    """Negative control for the test above: the same check sees TensorFlow when it is loaded."""
    code = "import sys, launcher.train.engine\nprint(any(m == 'tensorflow' for m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().endswith("True"), done.stderr[-2000:]
