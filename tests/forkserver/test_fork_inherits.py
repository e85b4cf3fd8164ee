"""A forked child is given what a new interpreter inherits from the process that starts it, not the server's: its
CPU affinity, resource limits, umask and stdin, and so the thread pools its libraries size by the CPUs."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest
import warm

from launcher import forkserver
from launcher.forkserver.alike import cannot_inherit, inherited

PROBE = '''
import importlib
import json
import os
import resource

import threadpoolctl
from hydra.experimental.callback import Callback

from launcher.forkserver.alike import RESOURCE_LIMITS
from launcher.forkserver.server import PRELOAD

for name in PRELOAD:  # the libraries the server loaded (no-ops in a fork), so both processes hold the same ones
    importlib.import_module(name)
with open("/proc/self/status") as status:
    umask = next(line.split()[1] for line in status if line.startswith("Umask:"))
with open(os.environ["PROBE_OUT"], "w") as out:
    json.dump(
        {
            "affinity": sorted(os.sched_getaffinity(0)),
            "rlimits": {name: resource.getrlimit(getattr(resource, name)) for name in RESOURCE_LIMITS},
            "umask": umask,
            "stdin": os.readlink("/proc/self/fd/0"),
            "threads": {info["filepath"]: info["num_threads"] for info in threadpoolctl.threadpool_info()},
        },
        out,
    )


class Probe(Callback):
    """Imported by Hydra as the launch starts (hydra.callbacks): records what the process was given."""
'''

REQUESTER = """
import os, resource, subprocess, sys
from launcher import forkserver
from launcher.forkserver.alike import cannot_inherit, inherited

os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (soft // 2, hard))
os.umask(0o027)
args = [sys.executable, "-m", "launcher", "explain=true", "+hydra.callbacks.probe._target_=probe.Probe"]
forked = forkserver.start([*args, "hydra.run.dir=forked"], cwd=".", env={**os.environ, "PROBE_OUT": "forked.json"})
cold = subprocess.Popen([*args, "hydra.run.dir=cold"], cwd=".", env={**os.environ, "PROBE_OUT": "cold.json"})
print(type(forked).__name__, forked.wait(), cold.wait())
"""


@pytest.fixture(autouse=True)
def the_suites_server_even_if_told_cold(monkeypatch):
    """These tests ask this test process's server for forks: they have it whatever LAUNCHER_TEST_COLD says, as
    tests/forkserver/test_warm.py does."""
    monkeypatch.delenv(warm.COLD_ENV, raising=False)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: no affinity narrower than the server's")
@pytest.mark.e2e  # a launch forked by this test process's server and a cold one
def test_a_forked_child_inherits_its_requesters_affinity_limits_umask_and_stdin_as_a_cold_one_does(tmp_path):
    """A requester narrows its CPU affinity to one CPU, halves its open-file limit and sets its umask, then starts
    the same launch forked (this test process's server, started before any of that) and cold: both record the
    same, with OpenBLAS and OpenMP sized for one CPU. Before, the fork had the server's affinity, limits and umask,
    its stdin was /dev/null, and its libraries kept a thread per CPU of the server's."""
    server = warm._warm_server()
    assert server is not None
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "stdin.txt").write_text("the requester's stdin\n")
    with open(tmp_path / "stdin.txt") as stdin:
        done = subprocess.run(
            [sys.executable, "-c", REQUESTER],
            cwd=tmp_path,
            env={**os.environ, forkserver.SOCKET_ENV: server.path},
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-3:] == ["ForkedProcess", "0", "0"], done.stdout[-2000:] + done.stderr[-3000:]
    forked, cold = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("forked", "cold"))
    assert forked == cold
    assert len(forked["affinity"]) == 1 and forked["umask"] == "0027"
    assert forked["rlimits"]["RLIMIT_NOFILE"][0] < forked["rlimits"]["RLIMIT_NOFILE"][1]
    assert forked["stdin"] == str(tmp_path / "stdin.txt")
    assert forked["threads"] and set(forked["threads"].values()) == {1}


def test_what_a_fork_cannot_be_given_makes_the_start_cold():
    """The server (here, this process) refuses a requester whose new interpreter would have a CPU it has not, a
    hard limit above its own (an unprivileged fork cannot raise one) or another stack limit (the C library sizes
    threads' stacks by it as the interpreter starts); it gives a fork lower limits and fewer CPUs."""
    own = inherited()
    assert cannot_inherit(own) is None
    lower = inherited()
    soft, hard = lower["rlimits"]["RLIMIT_NOFILE"]
    lower["rlimits"]["RLIMIT_NOFILE"] = [soft // 2, soft]
    lower["affinity"] = own["affinity"][:1]
    assert cannot_inherit(lower) is None
    elsewhere = {**own, "affinity": [max(os.sched_getaffinity(0)) + 1]}
    assert "CPU affinity" in cannot_inherit(elsewhere)
    stack = inherited()
    stack["rlimits"]["RLIMIT_STACK"] = [stack["rlimits"]["RLIMIT_STACK"][0] // 2, stack["rlimits"]["RLIMIT_STACK"][1]]
    assert "RLIMIT_STACK" in cannot_inherit(stack)
    if hard != resource.RLIM_INFINITY:
        higher = inherited()
        higher["rlimits"]["RLIMIT_NOFILE"] = [soft, hard + 1]
        assert cannot_inherit(higher) == "its hard RLIMIT_NOFILE is above the server's"
