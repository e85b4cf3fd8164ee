"""The test process itself: fixed matmul rates and 2 logical CPUs before TensorFlow starts, what every test must
leave as it found it (os.environ, Keras's policy, the repository's outputs/), markers and ordering, the guard
that refuses ungrouped xdist groups, and per-test CPU accounting."""

from __future__ import annotations

import atexit
import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import warm

from support.config import ROOT


def fixed_matmul_rates() -> None:
    """The suite never measures into (or decides by) the person's `~/.cache/launcher`: every test process and
    the launches it starts read this machine's key from a cache of fixed rates (the AMD EPYC's: bf16 about 2x
    float32 through oneDNN, XLA slower for bf16), so `precision=auto xla=auto` decide the same on every CPU.
    `tests/plan/test_hardware.py` measures for real, into a cache of its own."""
    from fakes import EPYC_RATES

    from launcher.plan.hardware import machine_key

    cache = tempfile.mkdtemp(prefix="launcher-test-cache-")  # whatever LAUNCHER_CACHE the person set
    atexit.register(shutil.rmtree, cache, ignore_errors=True)
    os.environ["LAUNCHER_CACHE"] = cache
    spread = {key: [rate, rate] for key, rate in EPYC_RATES.items()}
    now = time.time()  # sound and fresh: no launch of the suite measures again
    entry = {"rates": EPYC_RATES, "spread": spread, "rounds": 3, "measured_at": now, "checked_at": now, "busy": 0.0}
    (Path(cache) / "matmul_rates.json").write_text(json.dumps({machine_key(): entry}))


def _prepare_test_process() -> None:
    """A process that runs tests: its CPU as 2 logical devices before TensorFlow's runtime starts (default and
    mirrored strategies both run in-process), then the environment warm starts compare with."""
    from launcher.train.runtime import split_cpu

    split_cpu(2)
    warm.settle_environment()


def freeze_imports() -> None:
    """What collection imported (TensorFlow, Keras, MLflow, Hydra, the test modules: ~1M objects) is left alone by
    this process's garbage collector from now on, as a cold launch and the forkserver leave theirs
    (`launcher.console.load_tensorflow_quietly`): every full collection of a test, and the one each in-process launch
    ends with (`launcher.background.settle`), walks only what the tests made."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def environment_after_each_test():
    """What a test or the launcher code it calls in-process sets in os.environ (the launch's log-level defaults,
    say) ends with the test: the next one, and the warm starts compared with conftest's environment, see none."""
    before = dict(os.environ)
    yield
    if dict(os.environ) != before:
        os.environ.clear()
        os.environ.update(before)


REPOSITORY_OUTPUTS = (ROOT / "outputs", ROOT / "multirun")  # where a person's own `make train` and sweeps write


def _files_under(folders) -> dict[str, int]:
    return {str(path): path.stat().st_mtime_ns for folder in folders if folder.is_dir() for path in folder.rglob("*")}


@pytest.fixture(scope="session", autouse=True)
def repository_outputs_untouched():
    """No test writes into the repository's outputs/ or multirun/ (a person's own runs, store and artifacts live
    there): every launch keeps to its test's tmp_path. Checked when each test process ends."""
    before = _files_under(REPOSITORY_OUTPUTS)
    yield
    after = _files_under(REPOSITORY_OUTPUTS)
    written = sorted(path for path, mtime in after.items() if before.get(path) != mtime)
    assert not written, (
        f"the suite wrote {len(written)} file(s) into the repository (a test launch that resolved a path against "
        f"the repository, or a `make train` run beside the suite): {written[:5]}"
    )


@pytest.fixture(autouse=True)
def float32_policy_after_each_test():
    """Runs set Keras's global dtype policy and op determinism; never let one test's leak into the next
    (with determinism on, Keras silently turns `jit_compile=True` off)."""
    yield
    import keras
    from tensorflow.python.framework import config as tf_config  # TF has no public "disable"

    keras.mixed_precision.set_global_policy("float32")
    tf_config.disable_op_determinism()


E2E_FIXTURES = {
    "cli",
    "cli_here",
    "launcher_here",
    "shared_mlflow_server",
    "s3_server",
}  # the CLI end to end (in a subprocess or in-process)


def mark_and_order(items) -> None:
    """`e2e`: the test runs the CLI or starts processes (the real CLI in a subprocess or in-process, a server,
    workers: by its fixtures, its own code or a helper of its module that does); `slow`: multi-process or
    multi-device runs (by hand, and every case whose parameters name `mirrored`) and in-process trainings that
    take seconds of CPU each (by hand: full-size networks, the precision x XLA grids, the doctor's runs); `unit`:
    everything else (in-process logic and runs of a few steps), or a test marked `unit` by hand whose parameters
    name `mirrored` but that trains nothing. `make test-fast` runs the unit tests; CI runs all. `forking`: marked by
    hand, the tests of what the launcher forks itself (a dead server, a restart's attempts, local workers): `make
    test` runs them a second time with every launch the suite starts cold (`LAUNCHER_TEST_COLD=1`), as a person's
    launch is. tests/forkserver/ is not among them: its tests start their servers and launches themselves (or take
    this process's server whatever LAUNCHER_TEST_COLD says), so a second run would repeat the first."""
    import inspect

    def source_of(function) -> str:
        try:
            return inspect.getsource(function)
        except (OSError, TypeError):  # made at run time (no file behind it): nothing to read
            return ""

    spawning: dict[str, set[str]] = {}  # per module: its helpers that start processes
    for item in items:
        function = getattr(item, "function", None)
        source = source_of(function) if function is not None else ""
        module = getattr(item, "module", None)
        if module is not None and module.__name__ not in spawning:
            spawning[module.__name__] = {
                name
                for name, helper in vars(module).items()
                if inspect.isfunction(helper)
                and helper.__module__ == module.__name__
                and not name.startswith("test_")
                and any(word in source_of(helper) for word in ("subprocess", "Popen", "warm.run", "run_python("))
            }
        helpers = spawning.get(module.__name__, set()) if module is not None else set()
        if item.get_closest_marker("e2e") is not None or item.get_closest_marker("unit") is not None:
            continue  # marked by hand (e2e: the launcher code it calls starts a process; unit: it only composes)
        if (
            E2E_FIXTURES & set(getattr(item, "fixturenames", ()))
            or any(word in source for word in ("subprocess", "Popen", "warm.run", "run_python("))
            or any(f"{helper}(" in source for helper in helpers)
        ):
            item.add_marker(pytest.mark.e2e)
        elif "mirrored" in getattr(getattr(item, "callspec", None), "id", ""):
            item.add_marker(pytest.mark.slow)  # an in-process run on two replicas: a multi-device run
        elif item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.unit)
    # The longest first: on two workers the suite then ends on short tests, not on one long one.
    items.sort(key=lambda item: 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("e2e") else 2)


class LoadgroupGuard:
    """Tests marked `xdist_group` share a module fixture (a reference run, a sweep against a server) and must run in
    one worker under `--dist loadgroup`. pytest-xdist marks them by editing the node id, which pytest >= 9.2 ignores
    (pytest-xdist#1386): the fixture would then be made in each worker, silently. Refuse to run like that."""

    @pytest.hookimpl(trylast=True)  # after xdist's own hook in the worker
    def pytest_collection_modifyitems(self, config, items):
        if not getattr(config.option, "loadgroup", False):  # set in xdist workers only
            return
        lost = [item.nodeid for item in items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
        if lost:
            raise pytest.UsageError(f"--dist loadgroup is not grouping {lost[0]} (pytest-xdist#1386): pin pytest<9.2")


class CpuAccount:
    """`LAUNCHER_TEST_CPU=<file>`: append each test's wall time and CPU time (this process and the processes it
    waited for: launches, warm ones too, sweeps and their jobs, servers) as JSON lines. On two shared cores the
    suite's length follows its CPU time, not the wall time `--durations` shows."""

    def __init__(self, path: str):
        self.path = path

    @staticmethod
    def cpu_seconds() -> float:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + warm.children_cpu()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        wall, used = time.time(), self.cpu_seconds()
        yield
        row = {"test": item.nodeid, "wall": round(time.time() - wall, 2), "cpu": round(self.cpu_seconds() - used, 2)}
        with open(self.path, "a") as out:
            out.write(json.dumps(row) + "\n")


def configure(config) -> None:
    """The test process's runtime (not in xdist's controller), the group guard, CPU accounting."""
    # pytest-xdist's controller only hands tests to its workers: no TensorFlow runtime there (~8 CPU-s).
    if not (getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput")):
        _prepare_test_process()
    config.pluginmanager.register(LoadgroupGuard(), "launcher-loadgroup-guard")
    if path := os.environ.get("LAUNCHER_TEST_CPU"):
        config.pluginmanager.register(CpuAccount(path), "launcher-cpu-account")
