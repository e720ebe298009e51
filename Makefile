# Two commands for a newcomer: `make demo` runs the guard with no cluster, `make test` checks it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo lint bench clean chart

$(STAMP): pyproject.toml sandbox/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]' -e ./sandbox
	touch $(STAMP)

# The default suite in three processes (pytest-xdist) on two cores: most tests wait on servers,
# timeouts and subprocesses rather than compute (89 s against 96 s with four; two were slower
# still). On a fresh clone (.ci/run) its pytest run takes about 100 s, and ruff, mypy and the
# layer contracts about 22 s more. The slow suite (.ci/run) runs in one.
test: lint
	$(BIN)/pytest -q -n 3

demo: $(STAMP)
	$(BIN)/volcano-guard demo

# The chart's generated files (charts/generate.py says which; a test checks they are current).
chart: $(STAMP)
	$(BIN)/python charts/generate.py

# ruff (lint and format), mypy, and the layer contracts in pyproject.toml (import-linter).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache build *.egg-info
