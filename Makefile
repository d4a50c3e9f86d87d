# Every target sets itself up: a fresh clone needs only python3 (3.11+) and make.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: demo test lint chaos soak bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

demo: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" bash examples/demo.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

chaos: $(STAMP)
	$(BIN)/python -m pytest tests/chaos -v $(PYTEST_ARGS)

soak: $(STAMP)
	$(BIN)/python -m tests.chaos.soak

bench: $(STAMP)
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) .demo .mypy_cache .ruff_cache .pytest_cache
