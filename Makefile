# `make demo` runs the main job on the embedded default; `make test` runs the suite (CI runs it through .ci/run).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# requirements.lock pins every package the install takes, transitive ones included (`make lock` writes it from
# pyproject.toml); uv, itself pinned, installs from it.
UV_VERSION := 0.13.8
UV := $(BIN)/uv
LOCK := requirements.lock
# Three pytest workers on the machine's two cores (the whole suite 1,031 s against two workers' 1,188 s, 2026-12-07,
# the same load beside it), each with its own PostgreSQL servers; a module stays on one worker, so the scenarios its
# module-scoped fixtures build are built once.
PYTEST_WORKERS ?= 3
# e.g. PYTEST_ARGS=--basetemp=/tmp/mine when another pytest session runs beside this one
PYTEST_ARGS ?=
export DAGSTER_DISABLE_TELEMETRY := 1
export NO_MKDOCS_2_WARNING := 1
# make's commands write Python's bytecode caches (into .venv and the checkout's ignored __pycache__/) even where the
# environment says not to (PYTHONDONTWRITEBYTECODE, as in many CI and container images): without them every process
# the suite starts (the workers, the Dagster daemons, code servers and runs, each CLI command) compiles Dagster, pandas
# and radar_pipeline from source again, 1.5 s of CPU each for the code location alone (test_gate.py 89 s -> 51 s,
# 2026-12-07, load 3 on two cores). Written once, by the first process that imports a module.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install lock demo dev test test-unit lint bench bench-snapshot bench-engine bench-quality bench-gap bench-real-null bench-analysis bench-hot bench-backfill bench-run-cost bench-compact bench-noise bench-load bench-import bench-location bench-gate bench-receiver bench-webhook bench-plans bench-causes bench-power bench-gate-lab bench-rhythm clean

install: $(VENV)/.installed

# Redone only when pyproject.toml or the lock changed: the same versions on every machine, whatever was installed.
$(VENV)/.installed: pyproject.toml $(LOCK) $(VENV)/.uv-$(UV_VERSION)
	$(UV) pip install --quiet --python $(BIN)/python --constraints $(LOCK) -e '.[test]'
	touch $@

$(VENV)/.uv-$(UV_VERSION):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)
	touch $@

# Every extra (test, k8s: the image installs with the same lock), resolved for every platform and Python >= 3.11;
# versions already locked are kept where they still fit. To move everything to the newest: make lock LOCK_ARGS=--upgrade
lock: $(VENV)/.uv-$(UV_VERSION)
	$(UV) pip compile --quiet --universal --python-version 3.11 --all-extras --custom-compile-command 'make lock' \
		$(LOCK_ARGS) pyproject.toml -o $(LOCK)

demo: install
	$(BIN)/radar demo

dev: install
	$(BIN)/radar dev

# The docs (docs/, mkdocs.yml) are built first, offline, into the ignored site/: a broken link or anchor fails the test.
# Then `dg check defs`: the code location loads as Dagster loads it, with the project's dagster.yaml (no DAGSTER_HOME:
# a temporary instance, which needs no environment).
test: install
	$(BIN)/mkdocs build --strict --quiet
	env -u DAGSTER_HOME VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/dg check defs
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadscope $(PYTEST_ARGS)

# The unit tier: no PostgreSQL server, no Dagster daemon or webserver (42.7 s on the idle machine, 2026-12-02).
test-unit: install
	$(BIN)/pytest -n $(PYTEST_WORKERS) -m unit $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check radar_pipeline radar_pipeline_tests benchmarks
	$(BIN)/ruff format --check radar_pipeline radar_pipeline_tests benchmarks
	$(BIN)/mypy radar_pipeline

bench: bench-snapshot bench-engine bench-quality bench-analysis bench-hot bench-compact

bench-snapshot: install
	$(BIN)/python benchmarks/snapshot_bench.py

bench-plans: install
	$(BIN)/python benchmarks/plan_capture_bench.py

bench-engine: install
	$(BIN)/python benchmarks/engine_bench.py

bench-quality: install
	$(BIN)/python benchmarks/detection_quality.py

bench-gap: install
	$(BIN)/python benchmarks/gap_decomposition.py

bench-real-null: install
	$(BIN)/python benchmarks/real_null_check.py

bench-analysis: install
	$(BIN)/python benchmarks/analysis_bench.py

bench-hot: install
	$(BIN)/python benchmarks/hot_paths_bench.py

bench-noise: install
	$(BIN)/python benchmarks/noise_bench.py

bench-backfill: install
	$(BIN)/python benchmarks/backfill_bench.py

bench-run-cost: install
	$(BIN)/python benchmarks/run_cost_bench.py

bench-import: install
	$(BIN)/python benchmarks/import_bench.py

# The code location's load (every run, the daemon, the UI pay it) beyond `import dagster`, best of 3.
bench-location: install
	$(BIN)/python benchmarks/location_import_bench.py

# From a deploy's window closing to the gate's answer through the real daemon, 10 deploys (about 16 minutes).
bench-gate: install
	$(BIN)/python benchmarks/gate_latency.py

# `radar webhook serve` on one core (taskset) under 60 s of back-to-back deploy events: events/s, none lost or doubled.
bench-receiver: install
	$(BIN)/python benchmarks/receiver_bench.py

# A webhook's cost per message: the default payload, and a template rendered in its capped child process.
bench-webhook: install
	$(BIN)/python benchmarks/webhook_render_bench.py

# Issue 28's lab: real changes deployed on real PostgreSQL 18, and whether each detection's cause names the change
# (about 7 minutes; ARGS=--quick three scenarios, ARGS=--pg15 the lab again on Debian's PostgreSQL 15).
bench-causes: install
	$(BIN)/python benchmarks/causes_lab.py $(ARGS)

# Issue 29's lab: later looks, fleets of 8 targets, canary arms, statement groups and the budget's FDR procedure, each
# against a ceiling of the same design; prints the targets' table (each part's script: benchmarks/power_*.py).
bench-power: install
	for part in benchmarks/power_*.py; do $(BIN)/python $$part $(ARGS) || exit 1; done

# The gate on real PostgreSQL (docs/benchmarks.md): a 100-minute recording through radar's collector with both cores
# busy beside the server (GATE_LAB_ARGS= for an idle one), then its designed changes and null deploys analysed.
GATE_LAB ?= /tmp/radar-gate-lab.pkl
GATE_LAB_ARGS ?= --busy
bench-rhythm: install
	$(BIN)/python benchmarks/rhythm_lab.py

bench-gate-lab: install
	$(BIN)/python benchmarks/gate_lab.py --record $(GATE_LAB) --minutes 100 --phase-minutes 10 --steady-phases 3 \
		--events drop_index,create_index,work_mem_low,work_mem_high,function_x2,function_back,function_x1.5 \
		--scrape 5 $(GATE_LAB_ARGS)
	$(BIN)/python benchmarks/gate_lab.py --analyse $(GATE_LAB) --windows 180,300

bench-compact: install
	$(BIN)/python benchmarks/compaction_bench.py

# A sustained load through the real daemon, 50 then 200 targets for 15 minutes each (about 40 minutes); shorter:
# `make bench-load ARGS="--targets 4,10 --minutes 3"`.
bench-load: install
	$(BIN)/python benchmarks/load_bench.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache build site *.egg-info
