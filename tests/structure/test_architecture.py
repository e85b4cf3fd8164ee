"""The package tree reads as the data flow, and imports point one way.

config -> plan -> train -> launch     (sweep beside launch; leaves: contract, files, console, outcome, forkserver,
background, dirlock)
"""

from __future__ import annotations

import ast

from support.cli import run_python
from support.config import ROOT

PACKAGE = ROOT / "launcher"
LEAVES = {"contract", "files", "console", "outcome", "forkserver", "background", "dirlock"}
# What each stage may import from the launcher (besides itself).
ALLOWED = {
    "config": set(),
    "plan": {"config", "contract", "console"},
    "train": {"config", "plan", "contract", "console", "background"},
    "tracking": {"config", "files"},
    "export": {"config", "train", "contract", "files", "console"},
    "supervise": {"config", "forkserver", "outcome", "background"},
    "launch": {
        *("config", "plan", "train", "tracking", "contract", "files", "console", "outcome", "forkserver", "background"),
        *("dirlock", "export", "supervise"),
    },
    "inference": {"config", "plan", "train", "tracking", "export", "launch", "contract", "files", "console", "outcome"},
    "sweep": {"config", "tracking", "contract", "files", "console", "outcome", "forkserver", "dirlock"},
    "doctor": {"config", "plan", "train", "launch", "tracking", "contract", "files", "console", "outcome"},
    "__main__": {"config", "launch", "inference", "supervise", "sweep", "doctor", "outcome", "background"},
    **{leaf: set() for leaf in LEAVES},
    "outcome": {"files", "contract"},  # a leaf that writes through the shared JSON helpers; how a fit ends
    "forkserver": {"console", "outcome"},  # starts launcher processes: quiets TensorFlow, marks them forked
}
TF_FREE_MODULES = [
    "launcher.sweep.callback",
    "launcher.sweep.champion",
    "launcher.sweep.job",
    "launcher.sweep.summary",
    "launcher.sweep.search",
    "launcher.sweep.search_report",
    "launcher.sweep.space",
    "launcher.config.samplers",
    "launcher.config.study_storage",
    "launcher.sweep.shared",
    "launcher.launch.trial",
    "launcher.launch.hooks.pruning",
    "launcher.plan.resolve",
    "launcher.plan.schedule",
    "launcher.plan.resume",
    "launcher.plan.decisions",
    "launcher.config.precisions",
    "launcher.config.strategies",
    "launcher.plan.sharding",
    "launcher.plan.environment",
    "launcher.plan.hardware",
    "launcher.config.schema",
    "launcher.config.bounds",
    "launcher.config.models",
    "launcher.config.datasets",
    "launcher.config.exports",
    "launcher.config.tasks",
    "launcher.config.imports",
    "launcher.config.run_mode",
    "launcher.launch.checkpoint_policy",
    "launcher.contract",
    "launcher.files",
    "launcher.console",
    "launcher.background",
    "launcher.tracking.tracker",
    "launcher.tracking.client",
    "launcher.tracking.writes",
    "launcher.tracking.delivery",
    "launcher.tracking.spool",
    "launcher.tracking.uri",
    "launcher.launch.hooks.checkpoint",
    "launcher.launch.hooks.best_model",
    "launcher.launch.hooks.metrics",
    "launcher.launch.hooks.history",
    "launcher.launch.hooks.preemption",
    "launcher.launch.hooks.utilization",
    "launcher.launch.hooks.profiling",
    "launcher.launch.hooks.callback_state",
    "launcher.launch.params",
    "launcher.train.numerics",
    "launcher.launch.hooks.step_metrics",
    "launcher.launch.hooks.assembly",
    "launcher.launch.stopping",
    "launcher.launch.preflight",
    "launcher.launch.building",
    "launcher.launch.restore",
    "launcher.launch.agree",
    "launcher.launch.mlflow_run",
    "launcher.export.trained",
    "launcher.launch.finish",
    "launcher.doctor.diagnose",
    "launcher.outcome",
    "launcher.forkserver",
    "launcher.launch.shell",
    "launcher.launch.review",
    "launcher.__main__",
    "launcher.launch.train_mode",
    "launcher.inference.evaluate",
    "launcher.supervise.local_workers",
    "launcher.doctor.doctor_mode",
]
# What a function-level import may keep out of a process until it is needed: TensorFlow, Keras, MLflow and
# Hydra (the issue of every start-up), and the optional or slow extras (plots, Optuna's storage, sklearn).
ISOLATED = (
    "tensorflow",
    "keras",
    "mlflow",
    "hydra",
    "omegaconf",
    "matplotlib",
    "sklearn",
    "optuna",
    "alembic",
    "sqlalchemy",
)


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
    done = run_python(code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ok")


def test_a_module_that_imports_tensorflow_is_detected():
    """Negative control for the test above: the same check sees TensorFlow when it is loaded."""
    code = "import sys, launcher.train.engine\nprint(any(m == 'tensorflow' for m in sys.modules))"
    done = run_python(code)
    assert done.stdout.strip().endswith("True"), done.stderr[-2000:]


# ------------------------------------------------------------ cycles and function-level imports


def module_name(root, path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path) -> tuple[list[list[str]], list[tuple[int, list[str]]]]:
    """(module-level imports, function-level imports with their line), each as the names it could mean."""
    top, local = [], []

    def names(node) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        return [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)] if node.module else []

    def visit(node, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                (local.append((child.lineno, names(child))) if in_function else top.append(names(child)))
            else:
                visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

    visit(ast.parse(path.read_text()), False)
    return top, local


def import_graph(root, package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (module or function level)."""
    modules = {module_name(root, p): p for p in (root / package).rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        top, local = imports_of(path)
        every = [n for group in top for n in group] + [n for _, group in local for n in group]
        graph[name] = {n for n in every if n in modules and n != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import each other, directly or around a loop (Tarjan's components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def needless_local_imports(root, package: str) -> list[str]:
    """Function-level imports of modules that load nothing worth keeping out of a process."""
    modules = {module_name(root, p): p for p in (root / package).rglob("*.py")}
    isolating: dict[str, bool] = {}

    def isolates(name: str, seen: frozenset = frozenset()) -> bool:
        if name.split(".")[0] in ISOLATED:
            return True
        if name not in modules or name in seen:
            return False
        if name not in isolating:
            top, _ = imports_of(modules[name])
            isolating[name] = any(isolates(n, seen | {name}) for group in top for n in group)
        return isolating[name]

    found = []
    for path in sorted(modules.values()):
        for line, group in imports_of(path)[1]:
            candidates = [n for n in group if n in modules] or group[:1]
            if not any(isolates(n) for n in candidates):
                found.append(f"{path.relative_to(root)}:{line} imports {group[0]} inside a function")
    return found


def test_no_module_imports_itself_around_a_loop():
    assert cycles(import_graph(ROOT, "launcher")) == []


def test_function_level_imports_only_keep_heavy_packages_out_of_a_process():
    assert needless_local_imports(ROOT, "launcher") == []


def test_both_checks_fail_on_a_deliberately_broken_tree(tmp_path):
    """Negative control: a package with a loop (a -> b -> a, by a function-level import) and a needless
    function-level import of the standard library is caught by both checks."""
    package = tmp_path / "broken"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from broken import b\n")
    (package / "b.py").write_text("def f():\n    from broken import a\n    import json\n    import tensorflow\n")
    (package / "c.py").write_text("from broken.a import b\n")
    assert cycles(import_graph(tmp_path, "broken")) == [["broken.a", "broken.b"]]
    assert needless_local_imports(tmp_path, "broken") == [
        "broken/b.py:2 imports broken inside a function",
        "broken/b.py:3 imports json inside a function",
    ]
