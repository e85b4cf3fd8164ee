"""A forked child's BLAS and OpenMP libraries run the threads a new interpreter's would under the child's
environment, though the server loaded them: each library reads its limits (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS,
...) as it loads, so the server loads them with none (their defaults) and each child sets them to what they would
have read (joblib's workers set these limits, so a parallel sweep's jobs have them). A child without the limits
its server was started under runs the libraries' defaults: tests/forkserver/test_fork_equals_cold.py, whose server
is started so.

What a new interpreter's libraries choose is asked of a new interpreter: one that loads the same library files
under the same environment (their constructors read it, as when numpy or scikit-learn load them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import warm
from support.threads import PROBE, loaded_anew

from launcher import forkserver
from launcher.forkserver import child as in_the_fork
from launcher.forkserver.alike import THREAD_LIMIT_VARIABLES

UNLIMITED = {k: v for k, v in os.environ.items() if k not in THREAD_LIMIT_VARIABLES and k != forkserver.SOCKET_ENV}


@pytest.fixture(autouse=True)
def the_suites_server_even_if_told_cold(monkeypatch):
    """These tests ask this test process's server for forks: they have it whatever LAUNCHER_TEST_COLD says, as
    tests/forkserver/test_warm.py does."""
    monkeypatch.delenv(warm.COLD_ENV, raising=False)


def forked_threads(server: str, tmp_path, env: dict) -> dict[str, int]:
    """The threads of each library in a launch forked by `server` under `env` (recorded as the launch starts)."""
    (tmp_path / "probe.py").write_text(PROBE)
    out = tmp_path / "threads.json"
    args = [
        *(sys.executable, "-m", "launcher", "explain=true", f"hydra.run.dir={tmp_path / 'run'}"),
        "+hydra.callbacks.probe._target_=probe.Probe",
    ]
    child = forkserver.ForkedProcess(
        server, args, cwd=tmp_path, env={**env, "PROBE_OUT": str(out)}, stdout=subprocess.PIPE, text=True
    )
    output, _ = child.communicate(timeout=300)
    assert child.returncode == 0, output[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize(
    "limits",
    [
        {"OMP_NUM_THREADS": "1"},  # OpenMP, and OpenBLAS, which falls back to it
        {"OPENBLAS_NUM_THREADS": "1"},  # OpenBLAS only
        {"OMP_NUM_THREADS": "3"},  # OpenMP takes 3 whatever the CPUs; OpenBLAS at most one per CPU
        {},  # the libraries' defaults
    ],
)
@pytest.mark.e2e  # launches forked by this test process's server
def test_a_forked_child_runs_the_threads_its_limits_ask_for_as_a_new_interpreter_would(tmp_path, limits):
    """Replaces the test that stubbed out `threadpool_limits`: the libraries themselves are asked."""
    server = warm._warm_server()
    assert server is not None
    env = {**UNLIMITED, **limits}
    forked = forked_threads(server.path, tmp_path, env)
    assert forked, "no BLAS or OpenMP library loaded"
    assert forked == loaded_anew(forked, env)


class _Library:
    """What `ThreadPools` reads of one of threadpoolctl's library controllers."""

    def __init__(self, api: str, threads: int):
        self.filepath, self.internal_api, self.num_threads = f"/lib/{api}.so", api, threads


def test_the_threads_a_library_would_choose_follow_its_own_limits_then_its_default_on_the_childs_cpus():
    """The rule a forked child applies (`child.ThreadPools.chosen`): the first limit the library reads, OpenBLAS at
    most its default; unset, its default, which follows the CPUs when it was one per CPU in the server."""
    pools = object.__new__(in_the_fork.ThreadPools)
    pools.controller = type("Controller", (), {"lib_controllers": [_Library("openblas", 8), _Library("openmp", 8)]})
    pools.defaults, pools.cpus = {"/lib/openblas.so": 8, "/lib/openmp.so": 8}, 8
    assert pools.chosen({}, 8) == {"/lib/openblas.so": 8, "/lib/openmp.so": 8}
    assert pools.chosen({}, 2) == {"/lib/openblas.so": 2, "/lib/openmp.so": 2}  # a narrowed affinity
    assert pools.chosen({"OMP_NUM_THREADS": "1"}, 8) == {"/lib/openblas.so": 1, "/lib/openmp.so": 1}
    assert pools.chosen({"OPENBLAS_NUM_THREADS": "3", "OMP_NUM_THREADS": "1"}, 8)["/lib/openblas.so"] == 3
    assert pools.chosen({"OMP_NUM_THREADS": "16"}, 8) == {"/lib/openblas.so": 8, "/lib/openmp.so": 16}
    assert pools.chosen({"OMP_NUM_THREADS": "0"}, 8) == {"/lib/openblas.so": 8, "/lib/openmp.so": 8}  # not a limit
