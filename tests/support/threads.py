"""How many threads each BLAS/OpenMP library runs in a launch and in a new interpreter: the probe a launch loads as a
Hydra callback (`PROBE`, written as probe.py beside the launch), and the same library files loaded anew
(`loaded_anew`). Used by the forkserver's thread-limit and fork-equals-cold tests."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = '''
import importlib
import json
import os

import threadpoolctl
from hydra.experimental.callback import Callback

from launcher.forkserver.server import PRELOAD

for name in PRELOAD:  # the libraries the server loaded (no-ops in a fork), so both processes hold the same ones
    importlib.import_module(name)
with open(os.environ["PROBE_OUT"], "w") as out:
    json.dump({info["filepath"]: info["num_threads"] for info in threadpoolctl.threadpool_info()}, out)


class Probe(Callback):
    """Imported by Hydra as the launch starts (hydra.callbacks): records each loaded library's threads."""
'''

LOADED_ANEW = """
import ctypes, json, sys
libraries = json.loads(sys.argv[1])
for path in libraries:
    ctypes.CDLL(path)
import threadpoolctl
threads = {info["filepath"]: info["num_threads"] for info in threadpoolctl.threadpool_info()}
print(json.dumps({path: threads[path] for path in libraries if path in threads}))
"""


def loaded_anew(libraries, env: dict) -> dict[str, int]:
    """The threads each of `libraries` chooses loading in a new interpreter under `env`."""
    done = subprocess.run(
        [sys.executable, "-c", LOADED_ANEW, json.dumps(sorted(libraries))],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)
