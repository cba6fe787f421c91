# rollscope: `make run` sets up and opens the dashboard on the demo store; `make test` sets up
# and runs the whole test suite (browser and PostgreSQL tests included).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The CPU build on this kind of machine; for a GPU, install your CUDA torch into the venv first.
TORCH_SPEC ?= torch==2.13.0
STORE ?= rollscope.db
PORT ?= 8501
# Test processes: one per core (at most 4); each test file runs whole in one of them, so a
# module's dashboard or cluster starts once. TEST_WORKERS=0 runs everything in this process.
TEST_WORKERS ?= auto
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --maxprocesses=4 --dist loadfile

.PHONY: setup system-deps run demo test test-quick bench lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

system-deps:
	bash .ci/system-deps.sh

run: setup
	$(VENV)/bin/rollscope demo --store $(STORE) --serve --port $(PORT)

demo: setup
	$(VENV)/bin/rollscope demo --store $(STORE)

test: setup system-deps
	$(PYTEST)

test-quick: setup
	$(PYTEST) -m "not browser and not postgres and not slow"

bench: setup
	$(PY) -m pytest tests/benchmarks -q -s --benchmarks

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) artifacts .pytest_cache
