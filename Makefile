# The README's two commands: `make run` (the whole app on SQLite) and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Touched after a successful install: the venv is reinstalled only when pyproject.toml
# is newer than it (a fresh clone has none, so its first `make run` installs). `make run`
# needs the app's dependencies only; the tests, lint and benchmarks need the dev extras.
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test

.PHONY: venv run test test-fast lint fmt services

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $(RUN_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $(RUN_STAMP) $(STAMP)

venv: $(STAMP)

run: $(RUN_STAMP)
	$(BIN)/python scripts/run_all.py

services:
	bash scripts/test-services.sh

# The suite runs in parallel (pytest-xdist; a database per worker). Most of a test's time
# is spent waiting on engines and processes, so more workers than cores pay; --dist
# worksteal lets an idle worker take tests queued behind a long one.
TEST_WORKERS ?= 4
FAST_WORKERS ?= 2
FAST_MARKERS := not docker and not slow and not browser and not chaos

test: $(STAMP) services
	DATABASE_URL=$(TEST_DATABASE_URL) $(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# The quick loop: every test that needs no engine, browser or real process (PostgreSQL
# only), in under a minute. It is bound by the CPU, so one worker per core.
test-fast: $(STAMP)
	DATABASE_URL=$(TEST_DATABASE_URL) $(BIN)/pytest -n $(FAST_WORKERS) --dist worksteal -m "$(FAST_MARKERS)" $(PYTEST_ARGS)

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
