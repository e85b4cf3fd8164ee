"""The suite's root: the environment every test process starts from, then the fixtures and hooks, each from the
module of what it serves (`tests/support/`: config, cli, tracking, suite).

The pytest process splits its CPU into 2 logical devices before TensorFlow's runtime starts, so default and
mirrored strategies both run in-process.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Two test workers share two cores, and most tests start launcher processes of their own: one intra-op thread
# per TensorFlow process keeps them from oversubscribing the cores (each op still runs; inter-op parallelism,
# which mirrored replicas and collectives use, is left as TensorFlow sets it).
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
# The second opt-in of test-only fault injection (launcher/launch/faults.py): launches started by tests may fire
# the LAUNCHER_FAULT a test gives them; outside the suite a leftover LAUNCHER_FAULT is ignored.
os.environ["LAUNCHER_TEST_FAULTS"] = "1"

import pytest  # noqa: E402
from support import suite  # noqa: E402
from support.cli import cli, cli_here, launcher_here  # noqa: E402, F401  (fixtures)
from support.databases import postgres  # noqa: E402, F401  (fixture)
from support.exit_codes import every_exit_code_read  # noqa: E402, F401  (autouse fixture)
from support.suite import (  # noqa: E402, F401  (autouse fixtures)
    environment_after_each_test,
    float32_policy_after_each_test,
    repository_outputs_untouched,
)
from support.tracking import s3_server, shared_mlflow_server  # noqa: E402, F401  (fixtures)

suite.fixed_matmul_rates()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    suite.mark_and_order(items)


def pytest_collection_finish(session):
    suite.freeze_imports()


def pytest_configure(config):
    suite.configure(config)
