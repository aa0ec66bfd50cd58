# One entry point for people and CI. `make demo` and `make test` are the README's
# two commands; each installs what it needs first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: deps venv demo test lint typecheck unit generate check-generated bench clean

deps: venv
	@scripts/ensure-system-deps.sh

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

demo: deps
	$(BIN)/python -m demo

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy platform_common/jobs exporter dashboards alerts demo

unit: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider

generate: venv
	$(BIN)/python scripts/generate.py

check-generated: venv
	$(BIN)/python scripts/generate.py --check

test: deps lint typecheck check-generated unit

bench: deps
	$(BIN)/python bench/jobstore.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
