# Two commands for a newcomer: `make demo` runs the guard with no cluster, `make test` checks it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo lint bench clean manifests

$(STAMP): pyproject.toml sandbox/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]' -e ./sandbox
	touch $(STAMP)

# The default suite in three processes (pytest-xdist) on two cores: most tests wait on servers,
# timeouts and subprocesses rather than compute (89 s against 96 s with four; two were slower
# still). From a fresh clone, .venv made, `make test` takes 113 s. The slow suite (.ci/run)
# runs in one.
test: lint
	$(BIN)/pytest -q -n 3

demo: $(STAMP)
	$(BIN)/volcano-guard demo

# deploy/base/webhooks.yaml from the config shipped in deploy/base/config.yaml (a test checks it).
# Written aside and moved into place only on success: a config with a mistake fails with its
# one-line error and leaves the file as it was (an empty one would install no guard at all).
manifests: $(STAMP)
	$(BIN)/volcano-guard manifests --config deploy/base/config.yaml > deploy/base/webhooks.yaml.new \
		|| { rm -f deploy/base/webhooks.yaml.new; exit 1; }
	mv deploy/base/webhooks.yaml.new deploy/base/webhooks.yaml

# ruff (lint and format), mypy, and the layer contracts in pyproject.toml (import-linter).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache build *.egg-info
