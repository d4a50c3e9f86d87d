# Every target sets itself up: a fresh clone needs only python3 (3.11+) and make.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
LOCK := requirements.lock
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml $(LOCK) | sha256sum | cut -c1-12)
PYTEST_ARGS ?=
# `make test` runs the suite on this many pytest-xdist worker processes (0: in one process).
# Much of the suite waits (real processes, SMTP servers, rate windows, an outage), so workers
# overlap the waiting even on 2 cores; see docs/contributing.md, "How the suite runs".
# worksteal: a worker that runs out of tests takes queued ones from the other, so the long
# process tests at the end of the run do not queue behind one worker while the other idles.
# Four on the 2-core reference machine: the extra workers fill the cores while others wait on
# processes and windows (clean clone, .ci/run: 2 workers 710 s, 3 workers 622 s, 4 workers 597 s).
TEST_WORKERS ?= 4

.PHONY: demo test test-thorough lint chaos soak bench bench-big clean lock

# Exactly the versions (and file hashes) in requirements.lock, then Herald itself without letting
# pip resolve anything else: what was tested is what is installed.
$(STAMP): pyproject.toml $(LOCK)
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes --no-deps -r $(LOCK)
	$(BIN)/pip install --quiet --no-deps -e .
	$(BIN)/pip check
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# Re-resolve the lock after changing dependencies in pyproject.toml (needs the package index).
lock:
	python3 -m venv .lock-venv
	.lock-venv/bin/pip install --quiet pip-tools
	.lock-venv/bin/pip-compile --quiet --generate-hashes --extra dev --strip-extras --allow-unsafe \
		--no-emit-index-url --output-file $(LOCK) pyproject.toml
	rm -rf .lock-venv

demo: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" bash examples/demo.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mypy tests
	$(BIN)/lint-imports --no-cache  # the layering contracts in pyproject.toml [tool.importlinter]

# make test draws a quarter of each property test's examples (tests/support/examples.py);
# make test-thorough is the same suite with the full counts.
test: lint check-browser
	HERALD_HYPOTHESIS=quick $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

test-thorough: lint check-browser
	HERALD_HYPOTHESIS=thorough $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# The dashboard's browser tests (tests/browser, part of `make test`) drive Debian's Chromium,
# never a downloaded one. `make browser-tests` runs only them, after checking it is there.
.PHONY: check-browser browser-tests
check-browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null \
		|| [ -x "$${HERALD_CHROMIUM:-}" ] \
		|| { echo "the browser tests need Chromium: apt-get install chromium (or set HERALD_CHROMIUM)"; exit 1; }

browser-tests: $(STAMP) check-browser
	$(BIN)/python -m pytest tests/browser $(PYTEST_ARGS)

chaos: $(STAMP)
	$(BIN)/python -m pytest tests/chaos -v $(PYTEST_ARGS)

soak: $(STAMP)
	$(BIN)/python -m tests.chaos.soak

# Figures, ratios and targets in one run (about 5 minutes on the 2-core reference machine when
# it is otherwise idle); also written to build/bench/latest.json. BENCH_ARGS e.g. "--repeat 5".
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# The 1,000,000-recipient fan-out on PostgreSQL and its memory at 250k and 1M (not in `make bench`).
bench-big: $(STAMP)
	$(BIN)/python -m bench.run --only big --json build/bench/big.json $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .lock-venv .demo .mypy_cache .ruff_cache .pytest_cache
