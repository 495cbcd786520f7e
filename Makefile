# Two entry points for a fresh machine: `make test` (the suite) and, once the demo lands, `make demo`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export DAGSTER_DISABLE_TELEMETRY := 1

.PHONY: install test bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

test: install
	$(BIN)/pytest

bench: install
	$(BIN)/python benchmarks/snapshot_bench.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
