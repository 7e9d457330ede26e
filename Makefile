# The README's two commands: `make run` (the whole app on SQLite) and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test

.PHONY: venv run test lint fmt services

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

venv: $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'

run: venv
	$(BIN)/python scripts/run_all.py

services:
	bash scripts/test-services.sh

test: venv services
	DATABASE_URL=$(TEST_DATABASE_URL) $(BIN)/pytest $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
