"""A new interpreter's import of TensorFlow (`launcher.console.load_tensorflow_quietly`, the first thing a cold
launch's shell does): no garbage collection during the import, the imported heap frozen after it, the collector on
again; a process that had TensorFlow already (this test process, a forked launch) keeps its collector as it was.
What it saves: benchmarks/cold_start_gc.py."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest

from launcher.console import load_tensorflow_quietly

PROBE = """
import gc, json, sys
collections = []
gc.callbacks.append(lambda phase, info: phase == "start" and collections.append("tensorflow" in sys.modules))
from launcher.console import load_tensorflow_quietly
collections.clear()
load_tensorflow_quietly()
print(json.dumps({"frozen": gc.get_freeze_count(), "enabled": gc.isenabled(), "collections": collections}))
"""


@pytest.mark.slow
def test_a_new_interpreter_collects_once_after_the_import_then_freezes_it_and_collects_again():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["enabled"] is True
    assert seen["frozen"] > 100_000  # TensorFlow's and Keras's objects (~500k here)
    assert seen["collections"] == [True]  # none while importing, one once TensorFlow was in


@pytest.mark.unit
def test_a_process_that_has_tensorflow_already_keeps_its_collector_as_it_was():
    import tensorflow  # noqa: F401  (this test process's, as a forked launch has its server's)

    frozen, enabled = gc.get_freeze_count(), gc.isenabled()
    load_tensorflow_quietly()
    assert (gc.get_freeze_count(), gc.isenabled()) == (frozen, enabled)
