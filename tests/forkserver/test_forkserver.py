"""The launcher's forkserver (`launcher.forkserver`): which starts it forks, and that a forked child keeps a
new interpreter's process group and dies with a parent it was told to die with. The sweeps, local workers and
restarts that use it are tested end to end in their own files (their outcome records name the server).

Which starts fork alike (`launcher.forkserver.alike`), the requester's side (`launcher.forkserver.requester`) and
the messages (`launcher.forkserver.wire`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import warm
from support.config import ROOT, TINY
from support.tracking import store

from launcher import forkserver
from launcher.console import LOG_LEVEL_DEFAULTS
from launcher.forkserver import routing
from launcher.forkserver.server import PREPARE
from launcher.outcome import FINISHED, FORKED_BY_ENV, OutcomeRecord


def launcher(tmp_path, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "launcher", f"hydra.run.dir={tmp_path / 'run'}", *overrides]


class Recorded:
    """Stands in for `subprocess.Popen` in the routing tests: records that a start was cold."""

    started: list[list[str]] = []

    def __init__(self, args, **_options):
        Recorded.started.append(list(args))


@pytest.fixture(scope="module")
def server():
    """A live forkserver for the tests that ask one directly: this test process's own, whatever LAUNCHER_TEST_COLD
    says, as tests/forkserver/test_warm.py has it; not one more server."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(warm.COLD_ENV, raising=False)
        shared = warm._warm_server()
    assert shared is not None
    return shared


@pytest.fixture
def cold_starts(monkeypatch):
    Recorded.started = []
    monkeypatch.setattr(routing.subprocess, "Popen", Recorded)
    monkeypatch.setattr(routing, "_own_server", lambda env: pytest.fail("no server may start"))
    return Recorded.started


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["-m", "launcher", "tf_logs=true"], {}),  # TensorFlow's start-up lines are printed by its import
        (["-m", "launcher", "explain=true"], {forkserver.SOCKET_ENV: "off"}),  # the person turned it off
        (["-c", "print(1)"], {}),  # not the launcher
    ],
)
def test_starts_a_fork_cannot_be_are_new_interpreters_without_any_server(cold_starts, args, env):
    started = forkserver.start([sys.executable, *args], cwd=ROOT, env={**os.environ, **env, FORKED_BY_ENV: "1"})
    assert isinstance(started, Recorded)
    assert cold_starts == [[sys.executable, *args]]


@pytest.mark.parametrize(
    ("key", "value", "differs"),
    [
        ("TF_ENABLE_ONEDNN_OPTS", "0", True),  # read when TensorFlow loads
        ("PYTHONPATH", "/elsewhere", True),
        ("LC_ALL", "C", True),  # the interpreter's encoding
        ("TF_CONFIG", "{}", False),  # read when the strategy is made, after the fork
        ("PYTHONUNBUFFERED", "1", False),  # each child's stdio is made new
        ("LAUNCHER_FAULT", "RAISE@steps:1", False),
        ("OMP_NUM_THREADS", "1", False),  # a thread limit: applied after the fork (below)
        ("KMP_INIT_AT_FORK", "FALSE", False),  # joblib's, for Intel's OpenMP (not loaded)
        ("OMP_PROC_BIND", "true", True),
        ("CUDA_VISIBLE_DEVICES", "", False),  # read at cuInit, when the runtime starts (submitit's local jobs)
        ("CUDA_HOME", "/opt/cuda", True),
    ],
)
def test_a_variable_read_at_import_makes_a_start_differ(key, value, differs):
    imported_under = {k: v for k, v in os.environ.items() if k != key}
    assert (forkserver.differs_at_import({**imported_under, key: value}, imported_under) == key) is differs


def test_the_log_levels_a_launch_sets_before_its_import_do_not_make_its_children_differ():
    """A launch sets TensorFlow's, absl's and gRPC's log levels (when unset) before it imports TensorFlow, as the
    server does: its children inherit them and still fork alike; a level set to something else differs."""
    imported_under = {k: v for k, v in os.environ.items() if k not in LOG_LEVEL_DEFAULTS}
    child = {**imported_under, **LOG_LEVEL_DEFAULTS}
    assert forkserver.differs_at_import(child, imported_under) is None
    assert forkserver.differs_at_import(imported_under, child) is None
    louder = {**child, "TF_CPP_MIN_LOG_LEVEL": "0"}
    assert forkserver.differs_at_import(louder, imported_under) == "TF_CPP_MIN_LOG_LEVEL"


@pytest.mark.e2e  # starts this test process's server
def test_the_server_refuses_a_start_that_differs_at_import_and_names_the_variable(tmp_path, server):
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "0" if os.environ.get("TF_ENABLE_ONEDNN_OPTS") != "0" else "1"}
    with pytest.raises(forkserver.Refused, match="TF_ENABLE_ONEDNN_OPTS differs"):
        forkserver.ForkedProcess(server.path, launcher(tmp_path, "explain=true"), cwd=ROOT, env=env)


def test_a_forked_child_joins_its_requesters_group_and_dies_with_a_requester_that_is_killed(tmp_path, server):
    """The requester leads a process group of its own in the server's session: its child is in that group (a
    Ctrl-C reaches both, as with a new interpreter), and SIGKILL to the requester alone kills the child."""
    resume = tmp_path / "never"
    env = {**os.environ, "LAUNCHER_FAULT": "PAUSE@steps:2", "LAUNCHER_FAULT_RESUME": str(resume)}
    args = launcher(tmp_path, *TINY, f"tracking.uri={store(tmp_path / 'mlflow.db')}")
    requester_code = (
        "import os, subprocess, sys, time\n"
        "from launcher import forkserver\n"
        f"child = forkserver.start({args!r}, cwd={str(ROOT)!r}, stdout=subprocess.PIPE, text=True,"
        " dies_with_parent=True)\n"
        "print(child.pid, type(child).__name__, flush=True)\n"
        "for line in child.stdout:\n"
        "    if 'paused at steps 2' in line:\n"
        "        print('paused', flush=True)\n"
        "time.sleep(600)\n"
    )
    requester = subprocess.Popen(
        [sys.executable, "-c", requester_code],
        cwd=ROOT,
        env={**env, forkserver.SOCKET_ENV: server.path},
        stdout=subprocess.PIPE,
        text=True,
        process_group=0,
    )
    try:
        pid, kind = requester.stdout.readline().split()
        child = int(pid)
        assert kind == "ForkedProcess"
        assert os.getpgid(child) == requester.pid != os.getpgid(0)
        assert requester.stdout.readline().strip() == "paused"
        with open(f"/proc/{child}/stat") as stat:
            assert int(stat.read().rsplit(")", 1)[1].split()[1]) == server.process.pid  # its parent: the server
        requester.kill()
        requester.wait(30)
        deadline = time.time() + 30
        while os.path.exists(f"/proc/{child}") and time.time() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{child}"), "the child outlived the requester it was told to die with"
    finally:
        requester.kill()
        requester.stdout.close()
    assert OutcomeRecord.read(tmp_path / "run") is None  # killed while paused: it wrote no outcome


GC_PROBE = '''
import gc

import keras


def probe():
    """A person's callback factory, called in the launch: records what the garbage collector leaves alone."""
    with open("frozen.txt", "w") as out:
        out.write(str(gc.get_freeze_count()))
    return keras.callbacks.Callback()
'''


@pytest.mark.e2e  # a launch forked by this test process's server
def test_a_forked_launchs_garbage_collector_leaves_the_servers_imports_alone(tmp_path, server):
    """The server freezes its heap (TensorFlow, Keras, MLflow, Hydra: ~600k objects) before it forks, so a
    launch's full collections walk only what the launch made (`benchmarks/fork_prepare.py --without freeze`).
    Without it the launch's collector tracks them all."""
    (tmp_path / "gc_probe.py").write_text(GC_PROBE)
    args = launcher(
        tmp_path, *TINY, "train.epochs=1", "train.callbacks=[gc_probe:probe]", f"tracking.uri={store(tmp_path / 'db')}"
    )
    child = forkserver.ForkedProcess(server.path, args, cwd=tmp_path, env=dict(os.environ))
    assert child.wait(300) == 0
    assert int((tmp_path / "frozen.txt").read_text()) > 100_000


@pytest.mark.e2e  # starts a server of its own, from an owner process it then kills
def test_a_server_whose_owner_is_killed_takes_no_new_start_and_its_children_finish_and_report(tmp_path):
    """A sweep killed alone (SIGKILL: no atexit) leaves its jobs running, and a job's restart supervisor waits on an
    attempt the sweep's server forked to die with its parent (the supervisor). The attempt lives on and reports its
    exit; the server refuses new starts and ends after its last child. Before: the server ended with its owner,
    the attempt died with it and the supervisor got ChildProcessError."""
    owner_code = (
        "import os, time\n"
        "from launcher import forkserver\n"
        "print(forkserver.Server(dict(os.environ)).path, flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", owner_code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    resume = tmp_path / "resume"
    env = {**os.environ, "LAUNCHER_FAULT": "PAUSE@steps:2", "LAUNCHER_FAULT_RESUME": str(resume)}
    try:
        path = owner.stdout.readline().strip()
        args = launcher(tmp_path, *TINY, "train.epochs=1", f"tracking.uri={store(tmp_path / 'mlflow.db')}")
        child = forkserver.ForkedProcess(
            path, args, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, dies_with_parent=True
        )
        for line in child.stdout:
            if "paused at steps 2" in line:
                break
        with open(f"/proc/{child.pid}/stat") as stat:
            server = int(stat.read().rsplit(")", 1)[1].split()[1])
        owner.kill()
        owner.wait(30)
        deadline = time.time() + 30
        while os.path.exists(path) and time.time() < deadline:  # the server saw its owner go
            time.sleep(0.05)
        assert not os.path.exists(path)
        with pytest.raises(forkserver.Refused):
            forkserver.ForkedProcess(path, args, cwd=ROOT, env=env)
        assert child.poll() is None and running(server)  # both outlived the owner
        resume.touch()
        child.stdout.read()
        assert child.wait(120) == 0
        deadline = time.time() + 30
        while running(server) and time.time() < deadline:
            time.sleep(0.05)
        assert not running(server), "the server outlived its last child"
    finally:
        owner.kill()
        owner.stdout.close()
    assert OutcomeRecord.read(tmp_path / "run").status == FINISHED


def running(pid: int) -> bool:
    """Whether `pid` runs (an exited process that nobody has reaped yet does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_server_prepares_mlflows_package_index_that_a_model_export_reads(monkeypatch):
    """`PREPARE` makes MLflow's module-to-package map in the server (a model export checks its pip requirements
    against it; building it reads every installed package's metadata), so a forked launch finds it made."""
    from mlflow.utils import requirements_utils

    from launcher.launch.mlflow_record import index_installed_packages

    monkeypatch.setattr(requirements_utils, "_MODULES_TO_PACKAGES", None)
    monkeypatch.setattr(requirements_utils, "_PACKAGES_TO_MODULES", None)
    assert "launcher.launch.mlflow_record:index_installed_packages" in PREPARE
    index_installed_packages()
    assert requirements_utils._PACKAGES_TO_MODULES["tensorflow"] == "tensorflow"
    assert "keras" in requirements_utils._MODULES_TO_PACKAGES


def test_the_schemas_the_server_stored_are_not_stored_again_by_a_launch(monkeypatch):
    """`PREPARE` stores the config schemas in Hydra's store (converting each dataclass); a launch's
    `register_configs` then stores none again, and still reads the installed plugins' choices."""
    from hydra.core.config_store import ConfigStore

    from launcher.config import schema

    assert "launcher.config.schema:store_schemas" in PREPARE
    schema.store_schemas()
    stored: list[str] = []
    real = ConfigStore.store

    def recorded(self, name, node, group=None, **options):
        stored.append(f"{group}/{name}")
        return real(self, name, node, group=group, **options)

    monkeypatch.setattr(ConfigStore, "store", recorded)
    read = []
    monkeypatch.setattr(schema, "register_plugins", lambda cs: read.append(cs))
    schema.register_configs()
    assert not [s for s in stored if s.startswith("schema")], stored
    assert read == [ConfigStore.instance()]
