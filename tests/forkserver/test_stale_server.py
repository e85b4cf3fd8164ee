"""No stale server: once the source a forkserver imported changes on disk, it forks no more (a child would run its
old modules beside new ones it imports itself, which no new interpreter does) and the requester replaces it.

The source changed here is a copy of the launcher (and its conf) in the test's own directory, imported instead of the
repository's (first on PYTHONPATH, the working directory elsewhere), so the repository is never touched.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from support.config import ROOT

from launcher.forkserver.server import Source

CHANGE = "\nCHANGED = True  # written by the test after the server imported this file\n"

PROBE = '''
import json
import os

from hydra.experimental.callback import Callback

import launcher.forkserver.alike
from launcher.outcome import forkserver_pid

with open(os.environ["PROBE_OUT"], "w") as out:
    changed = getattr(launcher.forkserver.alike, "CHANGED", False)
    json.dump({"changed": changed, "file": launcher.__file__, "forked": forkserver_pid() is not None}, out)


class Probe(Callback):
    """Imported by Hydra as the launch starts (hydra.callbacks): records which launcher the process runs."""
'''

REQUESTER = """
import json, os, socket, sys
from launcher import forkserver

def health(path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        forkserver.send(sock, {"op": "health"})
        return forkserver.receive(sock)[0]

first = forkserver.share()  # this process's own server, exported as a sweep's is
before = health(first)["stale"]
with open(sys.argv[1], "a") as source:
    source.write(sys.argv[2])
after = health(first)["stale"]
args = [sys.executable, "-m", "launcher", "explain=true", "hydra.run.dir=run"]
args.append("+hydra.callbacks.probe._target_=probe.Probe")
try:
    forkserver.ForkedProcess(first, args, cwd=".", env=dict(os.environ))
    refused = None
except forkserver.Refused as error:
    refused = [str(error), error.stale]
child = forkserver.start(args, cwd=".")
print(json.dumps({
    "first": first, "before": before, "after": after, "refused": refused, "kind": type(child).__name__,
    "returncode": child.wait(), "now": os.environ[forkserver.SOCKET_ENV], "first_exists": os.path.exists(first),
}))
"""


@pytest.mark.e2e  # two servers of its own (the stale one and its replacement), and a launch forked by the second
def test_a_server_whose_source_changed_refuses_as_stale_and_is_replaced_before_it_forks(tmp_path):
    for part in ("launcher", "conf"):  # the package and the config beside it
        shutil.copytree(ROOT / part, tmp_path / "src" / part, ignore=shutil.ignore_patterns("__pycache__"))
    changed = tmp_path / "src" / "launcher" / "forkserver" / "alike.py"  # imported by the server and every launch
    (tmp_path / "probe.py").write_text(PROBE)
    pythonpath = os.pathsep.join(p for p in (str(tmp_path / "src"), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": pythonpath, "PROBE_OUT": str(tmp_path / "probe.json")}
    env.pop("LAUNCHER_FORKSERVER", None)
    done = subprocess.run(
        [sys.executable, "-c", REQUESTER, str(changed), CHANGE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["before"] is None
    assert seen["after"] == str(changed)
    assert seen["refused"] == [f"stale: {changed} changed since the server imported it", True]
    # The launch was forked, by a new server that imported the changed file; the stale one takes no more starts.
    assert seen["kind"] == "ForkedProcess" and seen["returncode"] == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert seen["now"] != seen["first"] and not seen["first_exists"]
    probe = json.loads((tmp_path / "probe.json").read_text())
    # An explain writes no outcome record: the launch itself says it was forked.
    assert probe == {"changed": True, "file": str(tmp_path / "src" / "launcher" / "__init__.py"), "forked": True}


def test_the_fingerprint_sees_a_changed_module_file_and_a_package_installed(tmp_path, monkeypatch):
    """What the server checks before each fork, over this process's imports: a module file changed in place (not
    one rewritten as it was) and a distribution upgraded beside the others (its `*.dist-info` renamed)."""
    site = tmp_path / "site-packages"
    (site / "example-1.0.dist-info").mkdir(parents=True)
    (tmp_path / "mine").mkdir()
    module = tmp_path / "mine" / "stale_probe_module.py"
    module.write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mine"))
    monkeypatch.delitem(sys.modules, "stale_probe_module", raising=False)
    source = Source(sites=[str(site)])
    importlib.import_module("stale_probe_module")
    source.imported()
    assert str(module) in source.files
    source.files = {str(module): source.files[str(module)]}  # not this process's others, edited or not meanwhile
    assert source.changed() is None
    later = module.stat().st_mtime_ns + 10**9

    module.write_text("VALUE = 1\n")  # rewritten as it was (a second later): its stat changed, not its content
    os.utime(module, ns=(later, later))
    assert source.changed() is None
    module.write_text("VALUE = 2\n")  # the same size, another content
    os.utime(module, ns=(later + 10**9, later + 10**9))
    assert source.changed() == str(module)

    fresh = Source(sites=[str(site)])
    assert fresh.changed() is None
    (site / "example-1.0.dist-info").rename(site / "example-1.1.dist-info")  # pip's upgrade
    assert fresh.changed() == "the installed packages"
    sys.modules.pop("stale_probe_module", None)
