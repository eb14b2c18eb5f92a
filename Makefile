# The two commands of the README: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PYTEST_WORKERS ?= 4

.PHONY: run test lint typecheck unit migrate clean docs bench-driver chaos mutate cluster test-tigerbeetle chromium

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,embedded]'
	$(MAKE) --no-print-directory chromium
	touch $@

## chromium: Debian's browser for the dashboard's Playwright tests (Playwright's own download is not
## reachable); installed non-interactively when absent and apt-get can (root), else a note.
chromium:
	@test -x /usr/bin/chromium || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && (DEBIAN_FRONTEND=noninteractive apt-get update -qq \
	      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) ; } \
	  || echo "note: /usr/bin/chromium is missing; the browser tests need it (apt-get install chromium)"

$(BIN)/.installed-bench: $(BIN)/.installed
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $@

## run: every role on the embedded PostgreSQL (unless DATABASE_URL is set), migrating first.
run: $(BIN)/.installed
	WORKER_ROLES=$${WORKER_ROLES:-all} PSP_NAMES=$${PSP_NAMES:-ipps,qp,wise} $(BIN)/paymanager run --migrate --demo

## test: lint, type check and the whole suite on both cores.
test: lint typecheck chromium
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup -q

lint: $(BIN)/.installed
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/ruff format --check src tests bench scripts

typecheck: $(BIN)/.installed
	$(BIN)/mypy

## chaos: the chaos suites at five times the scale CI runs them (kills, outages, restarts), and the
## PSP payouts at the issue's 500 (2 psp-workers, random faults; CI runs 40).
chaos: $(BIN)/.installed
	CHAOS_SCALE=$${CHAOS_SCALE:-5} CHAOS_PSP_PAYOUTS=$${CHAOS_PSP_PAYOUTS:-500} $(BIN)/pytest tests/chaos -q -s

## test-tigerbeetle: only the TigerBeetle half of the tests `make test` runs on both ledgers (the
## conformance suite, the model, the payments tests), each test process on a replica of its own.
test-tigerbeetle: $(BIN)/.installed
	$(BIN)/pytest tests/integration/ledger tests/integration/payments -k tigerbeetle \
	  -n $(PYTEST_WORKERS) --dist loadgroup -q

## cluster: a three-replica TigerBeetle cluster on this machine until Ctrl-C (prints its TB_ADDRESS).
cluster: $(BIN)/.installed
	$(BIN)/python scripts/tb_cluster.py 3

unit: $(BIN)/.installed
	$(BIN)/pytest tests/unit -q

migrate: $(BIN)/.installed
	$(BIN)/paymanager migrate

## bench-*: the benchmarks of bench/, each printing figures beside a same-run baseline.
bench-driver: $(BIN)/.installed-bench
	$(BIN)/python bench/driver.py

## mutate: break each line of scripts/mutations.toml in turn; the tests named must catch every one
## (docs/ARCHITECTURE.md, "Mutation checks"). Slow, so not part of `make test`.
mutate: $(BIN)/.installed
	$(BIN)/python scripts/mutate.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

## docs: regenerate the README's configuration table from config.py.
docs: $(BIN)/.installed
	$(BIN)/python scripts/config_table.py
