# One entry point for people and CI. `make demo` and `make test` are the README's
# two commands; each installs what it needs first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEPS_STAMP := $(VENV)/.dependencies

.PHONY: deps venv demo test lint typecheck unit generate check-generated bench clean

deps: venv
	@scripts/ensure-system-deps.sh

venv: $(STAMP)

# exporter/, monitoring/, dashboards/, alerts/ and runbooks/ install under the
# platform_common namespace (pyproject's package-dir). The strict editable mode links
# every file into one tree that Python and mypy both follow, so the install is redone
# when a file is added or removed (FILE_LIST changes only then): a Python module, and
# as much a Lua script or a page the package loads from its own directory.
FILE_LIST := $(VENV)/.package-files
PACKAGE_DIRS := $(wildcard platform_common exporter monitoring dashboards alerts runbooks)
$(shell mkdir -p $(VENV) && find $(PACKAGE_DIRS) -type f -not -path '*/__pycache__/*' \
	| sort > $(FILE_LIST).new && (cmp -s $(FILE_LIST).new $(FILE_LIST) || mv $(FILE_LIST).new $(FILE_LIST)))

# A changed pyproject.toml (or a new venv) is a full install; a file added or removed
# only relinks the tree: no dependency resolution, the venv's own setuptools builds
# the links (about 2 s instead of 6 s or more).
$(STAMP): pyproject.toml $(FILE_LIST)
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@if [ ! -e $(DEPS_STAMP) ] || [ pyproject.toml -nt $(DEPS_STAMP) ]; then \
		$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]' \
			--config-settings editable_mode=strict && touch $(DEPS_STAMP); \
	else \
		$(BIN)/pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
			-e . --config-settings editable_mode=strict; \
	fi
	@touch $(STAMP)

demo: deps
	$(BIN)/python -m demo

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy -p platform_common.jobs -p platform_common.jobs_exporter -p platform_common.jobs_monitoring -p demo -p tests

# Four pytest-xdist workers, each with its own servers, whatever the cores: most of the
# suite's minutes are waits on real time (workers, servers starting, Prometheus
# evaluating), not CPU, so four workers on two cores finish in about 7 minutes where two
# took 8.5 (measured side by side). worksteal evens out the long tests. A single file
# runs alone with plain `pytest`.
unit: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 4 --dist worksteal --durations=20

# SITE=path/to/site.yaml overlays a site's settings on monitoring/site.defaults.yaml;
# OUT=dir writes the bundle there instead of this repository's folders.
GENERATE_ARGS = $(if $(SITE),--site $(SITE)) $(if $(OUT),--out $(OUT))

generate: venv
	$(BIN)/python scripts/generate.py $(GENERATE_ARGS)
	$(BIN)/python -m platform_common.jobs.queue.payload_schema

check-generated: venv
	$(BIN)/python scripts/generate.py --check $(GENERATE_ARGS)
	$(BIN)/python -m platform_common.jobs.queue.payload_schema --check

test: deps lint typecheck check-generated unit

bench: deps
	$(BIN)/python -m bench.jobstore

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
