# `make train` and `make test` are all a newcomer needs: both bootstrap .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Test processes in parallel (pytest-xdist); most tests wait on subprocesses, so 2 helps even on 2 cores.
TEST_WORKERS ?= 2
SOURCES := launcher hydra_plugins models datasets tests benchmarks examples

.PHONY: train test test-fast lint format explain clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,sweeps]'
	touch $(STAMP)

train: $(STAMP)
	$(PY) -m launcher $(ARGS)

explain: $(STAMP)
	$(PY) -m launcher explain=true $(ARGS)

# Every test process (and each launch it starts cold) imports the launcher and the tests again: they keep their
# bytecode (git-ignored __pycache__) even where PYTHONDONTWRITEBYTECODE is set, ~4.5 CPU-s less per test process.
PYTEST := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest
# A test process that crashes is not replaced: its test fails and the run ends. pytest-xdist 3.8 replaces it and,
# under --dist loadgroup, can then wait forever (pytest-xdist#1323, #1327, #1378; the fixes are unreleased).
XDIST := -n $(TEST_WORKERS) --dist loadgroup --max-worker-restart=0

# Then the cold slice: the tests that exercise forking, with every launch a new interpreter (as a person's is) and
# the launcher's own forkserver for the children it starts, not the suite's (tests/warm.py).
test: lint
	$(PYTEST) tests $(XDIST) $(PYTEST_ARGS)
	LAUNCHER_TEST_COLD=1 $(PYTEST) tests $(XDIST) -m forking $(PYTEST_ARGS)

# The inner loop: unit tests only (no subprocess, no multi-process run).
test-fast: lint
	$(PYTEST) tests $(XDIST) -m unit $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check $(SOURCES)
	$(PY) -m ruff format --check $(SOURCES)

format: $(STAMP)
	$(PY) -m ruff format $(SOURCES)
	$(PY) -m ruff check --fix $(SOURCES)

clean:
	rm -rf outputs multirun .pytest_cache
