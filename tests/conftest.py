"""Shared fixtures: the real composed config (shrunk), fake environments, a 2-CPU runtime.

The pytest process splits its CPU into 2 logical devices before TensorFlow's
runtime starts, so default and mirrored strategies both run in-process.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import warm

from launcher.launch.local_workers import free_ports  # the product's own; re-exported to tests

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Two test workers share two cores, and most tests start launcher processes of their own: one intra-op thread
# per TensorFlow process keeps them from oversubscribing the cores (each op still runs; inter-op parallelism,
# which mirrored replicas and collectives use, is left as TensorFlow sets it).
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
# The second opt-in of test-only fault injection (launcher/launch/faults.py): launches started by tests may fire
# the LAUNCHER_FAULT a test gives them; outside the suite a leftover LAUNCHER_FAULT is ignored.
os.environ["LAUNCHER_TEST_FAULTS"] = "1"

ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = ROOT / "conf"

# Overrides that keep a real run small and fast.
TINY = [
    "model.hidden_units=[32]",
    "train.epochs=2",
    "scaling.batch_size=32",
    "train.steps_per_execution=4",
]


def _fixed_matmul_rates() -> None:
    """The suite never measures into (or decides by) the person's `~/.cache/launcher`: every test process and
    the launches it starts read this machine's key from a cache of fixed rates (the AMD EPYC's: bf16 about 2x
    float32 through oneDNN, XLA slower for bf16), so `precision=auto xla=auto` decide the same on every CPU.
    `tests/test_hardware.py` measures for real, into a cache of its own."""
    from fakes import EPYC_RATES

    from launcher.plan.hardware import machine_key

    cache = tempfile.mkdtemp(prefix="launcher-test-cache-")  # whatever LAUNCHER_CACHE the person set
    atexit.register(shutil.rmtree, cache, ignore_errors=True)
    os.environ["LAUNCHER_CACHE"] = cache
    spread = {key: [rate, rate] for key, rate in EPYC_RATES.items()}
    now = time.time()  # sound and fresh: no launch of the suite measures again
    entry = {"rates": EPYC_RATES, "spread": spread, "rounds": 3, "measured_at": now, "checked_at": now, "busy": 0.0}
    (Path(cache) / "matmul_rates.json").write_text(json.dumps({machine_key(): entry}))


_fixed_matmul_rates()


_STORE_TEMPLATE: list[Path] = []


def store(path: Path) -> str:
    """The URI of a SQLite MLflow store at `path`, made from an empty store migrated once per test process:
    MLflow's first open of a new store runs its schema migrations (~1.5 s a launch). A test of a first run on a
    truly new store gives a path that does not exist instead."""
    if not _STORE_TEMPLATE:
        from mlflow.tracking import MlflowClient

        folder = Path(tempfile.mkdtemp(prefix="launcher-test-store-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        MlflowClient(f"sqlite:///{folder}/empty.db").search_experiments()
        _STORE_TEMPLATE.append(folder / "empty.db")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_STORE_TEMPLATE[0], path)
    return f"sqlite:///{path}"


def runs_in(path: Path) -> list:
    """Every MLflow run in the SQLite store at `path`, of every experiment (none when there is no store)."""
    if not path.exists():
        return []
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{path}")
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


def _prepare_test_process() -> None:
    """A process that runs tests: its CPU as 2 logical devices before TensorFlow's runtime starts (default and
    mirrored strategies both run in-process), then the environment warm starts compare with."""
    from launcher.train.runtime import split_cpu

    split_cpu(2)
    warm.settle_environment()


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


_COMPOSED: dict[tuple[str, ...], object] = {}  # by the group overrides: Hydra's costly step, once per process
HYDRA_COMPOSE_ENV = "LAUNCHER_TEST_HYDRA_COMPOSE"  # =1: every `compose` is Hydra's whole compose


@functools.cache
def _schemas_registered() -> None:
    """The launcher's schemas in Hydra's ConfigStore, once per process (storing them each time cost a quarter of a
    compose)."""
    from launcher.config.schema import register_configs

    register_configs()


def hydra_compose(overrides) -> object:
    """Hydra's compose API on conf/config.yaml, as the CLI composes (its `hydra` node left out)."""
    from hydra import compose as compose_api
    from hydra import initialize_config_dir

    _schemas_registered()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose_api(config_name="config", overrides=list(overrides))


@functools.cache
def _groups_repository():
    """Hydra's config repository of conf/ (its search path), made once per process: which keys are config groups."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    _schemas_registered()  # before the repository: Hydra 1.3 keeps a copy of the ConfigStore in it
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return GlobalHydra.instance().config_loader()._parse_overrides_and_create_caching_repo("config", [])[1]


def _split_as_hydra_does(overrides) -> tuple[tuple[str, ...], list] | None:
    """(the overrides that choose group options, the parsed overrides that set keys), split by Hydra's own parser
    and rule (a dict value or a key that is no config group sets a key; `defaults_list.Overrides`); None for a
    list Hydra must compose whole (a sweep, a key of the `hydra` node such as its search path)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    repository = _groups_repository()
    groups, keys = [], []
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        if override.is_sweep_override():
            return None
        if isinstance(override.value(), dict) or not repository.group_exists(override.key_or_group):
            if override.key_or_group.split(".")[0] == "hydra":
                return None
            keys.append(override)
        else:
            groups.append(override.input_line)
    return tuple(groups), keys


def compose(*overrides: str):
    """Compose conf/config.yaml with overrides as the CLI does. Hydra composes in two steps: the group options
    the overrides choose (its defaults list, ~0.3 CPU-s), then, in struct mode, the keys the others set
    (`ConfigLoaderImpl._apply_overrides_to_config`). The first step runs once per test process for each list of
    group overrides; each call then sets its keys on a copy with Hydra's own function (tests change what they
    get). `tests/test_suite_compose.py` checks this gives Hydra's compose, config and error alike."""
    import copy

    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    split = None if os.environ.get(HYDRA_COMPOSE_ENV) == "1" else _split_as_hydra_does(overrides)
    if split is None:
        return hydra_compose(overrides)
    groups, keys = split
    if groups not in _COMPOSED:
        _COMPOSED[groups] = hydra_compose(groups)
    composed = copy.deepcopy(_COMPOSED[groups])
    ConfigLoaderImpl._apply_overrides_to_config(keys, composed)
    return composed


def config(*overrides: str):
    from omegaconf import OmegaConf

    return OmegaConf.to_object(compose(*overrides))


@pytest.fixture
def cli(tmp_path):
    """Run the real `python -m launcher` in a process of its own with a temp run dir and MLflow store: started warm
    (tests/warm.py: forked with TensorFlow already imported) unless it must be a new interpreter."""

    def run(
        *overrides: str,
        timeout: int = 300,
        env: dict | None = None,
        cwd: Path = ROOT,
        new_store: bool = False,
        cold: bool = False,
    ):
        """`new_store`: the launch creates its MLflow store (else it opens an empty one made for the test).
        `cold`: a new interpreter, for tests of what a fresh process prints while it loads TensorFlow."""
        db = tmp_path / "mlflow.db"
        args = [
            sys.executable,
            "-m",
            "launcher",
            f"hydra.run.dir={tmp_path}/run",
            f"tracking.uri={f'sqlite:///{db}' if new_store else store(db)}",
            *overrides,
        ]
        full_env = {**os.environ, **(env or {})}
        return warm.run(args, cwd=cwd, env=full_env, timeout=timeout, cold=cold)

    return run


@dataclass(frozen=True)
class Ran:
    """What a launch left on the console, as `subprocess.run` gives it."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def launcher_here(capfd, monkeypatch):
    """`python -m launcher <args>` through its real entry (Hydra's main, the shell, exit codes), run in this test
    process with TensorFlow already loaded: about 6 s less per launch. For launches whose test is not about the
    process itself (no kill, no signal, no fresh runtime or device split, no sweep): those start a process."""
    import logging

    from absl import logging as absl_logging

    import launcher.__main__ as cli_module

    def run(args: list[str], cwd: Path, env: dict | None = None) -> Ran:
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        capfd.readouterr()
        with monkeypatch.context() as patch:
            # Hydra configures logging for its job, which closes every handler; absl's (TensorFlow is loaded here,
            # before Hydra, unlike in a CLI process) would close the stream it holds: one of pytest's captures.
            patch.setattr(absl_logging.get_absl_handler().python_handler, "stream", sys.__stderr__)
            patch.setattr(sys, "argv", ["launcher", *args])
            patch.delenv("LAUNCHER_FAULT", raising=False)  # only the fault this launch is given fires in it
            for key, value in (env or {}).items():
                patch.setenv(key, value)
            patch.chdir(cwd)
            patch.syspath_prepend(str(cwd))  # as `python -m` does: the person's packages import from there
            imported, environment = set(sys.modules), dict(os.environ)
            try:
                cli_module.entry()
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            finally:
                # What the launch set for itself (its log-level and MLflow defaults) ends with it, as with its
                # process: the test process's environment stays the one warm starts compare with.
                os.environ.clear()
                os.environ.update(environment)
                # The person's modules: the next launch imports its own. Never the launcher's own (first imported
                # lazily during a launch from the repository root): a second copy would break isinstance checks.
                own = (ROOT / "launcher").resolve().is_relative_to(Path(cwd).resolve())
                for name in set(sys.modules) - imported if not own else ():
                    if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(cwd)):
                        del sys.modules[name]
                for handler in root.handlers:  # Hydra configured logging for its job: undo it
                    if handler not in handlers:
                        handler.close()
                root.handlers[:], root.level = handlers, level
        out, err = capfd.readouterr()
        return Ran(code, out, err)

    return run


@pytest.fixture
def cli_here(tmp_path, launcher_here):
    """`cli`'s launch (a temp run dir and MLflow store) through `launcher_here`: in this process."""

    def run(*overrides: str, env: dict | None = None) -> Ran:
        args = [f"hydra.run.dir={tmp_path}/run", f"tracking.uri={store(tmp_path / 'mlflow.db')}", *overrides]
        return launcher_here(args, tmp_path, env)

    return run


def digits_shards(folder: Path, shards: int) -> str:
    """The digits written as TFRecord shards by the converter; returns the training glob."""
    import numpy as np
    from launcher_datasets.to_tfrecord import convert
    from sklearn.datasets import load_digits

    digits = load_digits()
    np.savez(folder / "digits.npz", x=(digits.images / 16.0).astype("float32")[..., None], y=digits.target)
    convert(folder / "digits.npz", folder / "shards", shards=shards)
    return f"{folder}/shards/train-*.tfrecord"


def run_python(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -c <code>` in a new interpreter from the repository root ('' first on sys.path, as for
    `python -m launcher`); its output captured as text. A test that calls it starts a process (marked e2e)."""
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env, timeout=timeout
    )


def free_port() -> int:
    return free_ports(1)[0]


class MlflowServer:
    """A real `mlflow server` on 127.0.0.1 over a SQLite store in `folder`; stop and start it again
    on the same port and store (a tracking outage)."""

    def __init__(self, folder: Path, port: int | None = None):
        self.folder, self.port = folder, port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.artifacts = folder / "artifacts"
        self.proc = None

    def start(self) -> MlflowServer:
        self.log = open(self.folder / "server.log", "a")  # noqa: SIM115  (closed in stop)
        mlflow = Path(sys.executable).with_name("mlflow")
        self.proc = subprocess.Popen(
            [
                str(mlflow),
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
                "--backend-store-uri",
                store(self.folder / "server.db"),
                "--artifacts-destination",
                str(self.artifacts),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # No job consumers: MLflow 3 starts four huey processes per server for its GenAI jobs, which the
            # launcher never uses and which took CPU from the runs under test.
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        )
        deadline = time.time() + 90
        while True:
            try:
                if urllib.request.urlopen(f"{self.url}/health", timeout=2).read() == b"OK":
                    return self
            except OSError:
                pass
            if time.time() > deadline or self.proc.poll() is not None:
                self.stop()
                pytest.fail(f"mlflow server did not start: {(self.folder / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Stop the server and every worker process it started (their session)."""
        if self.proc is None:
            return
        import signal

        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None
        self.log.close()


SHARED_SERVER_GROUP = "tracking-server"  # the xdist group of every test that uses `shared_mlflow_server`


@pytest.fixture(scope="session")
def shared_mlflow_server(tmp_path_factory):
    """One real `mlflow server` for the tests that only log to one, each in an experiment of its own (a start is
    ~14 CPU-s: the CLI and its uvicorn worker each import MLflow). Its tests are in the xdist group
    `SHARED_SERVER_GROUP`, so one test process starts it once."""
    server = MlflowServer(tmp_path_factory.mktemp("shared-server")).start()
    yield server.url, server.artifacts
    server.stop()


@pytest.fixture
def s3_server(tmp_path, monkeypatch):
    """An S3-compatible server (moto) on 127.0.0.1 with an empty bucket `ckpts`; this process and the launches it
    starts reach it through the environment variables boto reads (never the person's ~/.aws)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    endpoint = "http://{}:{}".format(*server.get_host_and_port())
    # moto keeps its buckets per process, across servers: start each test from an empty store.
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=10).read()
    for key, value in {
        "AWS_ACCESS_KEY_ID": "launcher-test-key",
        "AWS_SECRET_ACCESS_KEY": "launcher-test-secret-do-not-log",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "MLFLOW_S3_ENDPOINT_URL": endpoint,
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
    }.items():
        monkeypatch.setenv(key, value)
    import fsspec

    fs, _ = fsspec.core.url_to_fs("s3://ckpts", skip_instance_cache=True)
    fs.mkdir("ckpts")
    yield endpoint
    server.stop()


E2E_FIXTURES = {
    "cli",
    "cli_here",
    "launcher_here",
    "shared_mlflow_server",
    "s3_server",
}  # the CLI end to end (in a subprocess or in-process)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """`e2e`: the test runs the CLI or starts processes (the real CLI in a subprocess or in-process, a server,
    workers: by its fixtures, its own code or a helper of its module that does); `slow`: multi-process or
    multi-device runs (by hand, and every case whose parameters name `mirrored`) and in-process trainings that
    take seconds of CPU each (by hand: full-size networks, the precision x XLA grids, the doctor's runs); `unit`:
    everything else (in-process logic and runs of a few steps), or a test marked `unit` by hand whose parameters
    name `mirrored` but that trains nothing. `make test-fast` runs the unit tests; CI runs all."""
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


def pytest_configure(config):
    # pytest-xdist's controller only hands tests to its workers: no TensorFlow runtime there (~8 CPU-s).
    if not (getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput")):
        _prepare_test_process()
    config.pluginmanager.register(LoadgroupGuard(), "launcher-loadgroup-guard")
    if path := os.environ.get("LAUNCHER_TEST_CPU"):
        config.pluginmanager.register(CpuAccount(path), "launcher-cpu-account")
