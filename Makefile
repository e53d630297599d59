# Crewlet: the two commands are `make run` and `make test`; everything they need is set up here.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEV_ENV := var/dev.env
CONFIG ?= examples/crewlet.yaml
COMPANY ?= examples/company.yaml

# `make run PORT=8123`: the example config reads the port from CREWLET_PORT (8000 unless set),
# so an exported CREWLET_PORT works as well, for this and every later command.
ifdef PORT
export CREWLET_PORT := $(PORT)
endif

.PHONY: run test test-long lint setup venv keyring migrate chromium bench chaos clean superuser mutants

$(STAMP): pyproject.toml
	@test -x $(PY) || { echo "setting up: creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	@echo "setting up: upgrading pip in $(VENV)"
	@$(PY) -m pip install --quiet --upgrade pip
	@echo "setting up: installing Crewlet and its dependencies from pyproject.toml into $(VENV) (the first time takes about half a minute)"
	@$(PY) -m pip install --quiet -e '.[test]'
	@echo "setting up: done"
	@touch $(STAMP)

venv: $(STAMP)

# The development keyring and tokens, made once, kept under var/ with mode 0600.
$(DEV_ENV): | $(STAMP)
	@mkdir -p var && chmod 700 var
	@umask 077 && $(PY) manage.py crewlet_secrets devenv > $(DEV_ENV).tmp && mv $(DEV_ENV).tmp $(DEV_ENV)
	@chmod 600 $(DEV_ENV)
	@echo "made a development keyring and API tokens in $(DEV_ENV) (mode 0600)"

keyring: $(DEV_ENV)

setup: $(STAMP) $(DEV_ENV)

migrate: setup
	@set -a && source $(DEV_ENV) && set +a && CREWLET_CONFIG=$(CONFIG) $(PY) manage.py migrate --no-input -v 0

run: migrate
	@set -a && source $(DEV_ENV) && set +a && exec $(PY) manage.py crewlet_node --config $(CONFIG) --company $(COMPANY)

# Four workers, a test file to each: the suite mostly waits on real processes (nodes, brokers,
# Chromium), so four share two cores; a file keeps its module fixtures on one worker.
test: setup chromium lint
	@set -a && source $(DEV_ENV) && set +a && $(PY) -m pytest -q -n 4 --dist loadfile

# The cases marked `long`: the product's default timings where they are too slow for `make test`
# (leases lapsing at 45 s after a SIGKILL). About four minutes.
test-long: setup
	@set -a && source $(DEV_ENV) && set +a && CREWLET_LONG_TESTS=1 $(PY) -m pytest -q -m long

# The import rule (DESIGN.md's layers, as contracts in pyproject.toml) and ruff's checks.
lint: setup
	@out=$$($(VENV)/bin/lint-imports --no-cache 2>&1) || { echo "$$out"; echo "lint-imports: an import breaks DESIGN.md's layers (above)"; exit 1; }
	@$(VENV)/bin/ruff check --quiet .

# The browser tests drive Debian's Chromium through Playwright (never `playwright install`).
chromium:
	@test -x /usr/bin/chromium || { \
	  echo "installing chromium for the browser tests (apt-get)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; }

# The chaos suite's long version (2,000 tasks over 30 seats, on an embedded and an external
# three-member cluster) and twenty fresh clusters started together; `make test` runs the short one.
chaos: setup
	@set -a && source $(DEV_ENV) && set +a && CREWLET_CHAOS=long $(PY) -m pytest -q -s tests/chaos tests/fleet/test_formation.py

bench: setup
	@set -a && source $(DEV_ENV) && set +a && for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) var mutants

# Mutation testing (mutmut 3, configured under [tool.mutmut] in pyproject.toml): engine/queue/contract.py,
# seats/host.py, notify/sources/ and engine/coord/ (the ledger is engine/coord/ledger.py), each
# mutant run against the in-process tests that reach it. mutmut 3 mutates code inside functions
# only: module constants (MAX_DELIVERIES and the like) are pinned by tests/test_contract_numbers.py.
# Not part of `make test`. `make mutants MUTANTS='notify.sources*'` tests only the mutants whose
# names match (mutmut's `run NAME-GLOB...`; names read `notify.sources.slack.xǁSlackǁverify__mutmut_3`,
# so 'seats.host.*_settle__*' picks one function; several globs go space-separated in the quotes).
# Every run still writes all the scope's mutants (about 20 s the first time, under a second after)
# and, the first time or after the test selection changes, runs the selected tests once to map
# them to functions (a few minutes); the progress line counts over the whole scope (N/5242), not
# over the filter. A named mutant is tested again even when mutants/ holds its result. Results stay
# in mutants/ (`.venv/bin/mutmut results`, `.venv/bin/mutmut show NAME`).
MUTANTS ?=
MUTANT_CHILDREN ?= 2
$(VENV)/.mutmut: pyproject.toml | $(STAMP)
	@$(PY) -m pip install --quiet -e '.[test,mutants]'
	@touch $@

mutants: setup $(VENV)/.mutmut
	@set -f && set -a && source $(DEV_ENV) && set +a && $(VENV)/bin/mutmut run --max-children $(MUTANT_CHILDREN) $(MUTANTS); \
	status=$$?; $(VENV)/bin/mutmut results | grep -v ": not checked$$"; exit $$status

# An operator account for the dashboard and /admin/: asked for at a terminal; without one, taken
# from DJANGO_SUPERUSER_USERNAME, DJANGO_SUPERUSER_PASSWORD and DJANGO_SUPERUSER_EMAIL.
superuser: migrate
	@set -a && source $(DEV_ENV) && set +a; \
	if [ -n "$$DJANGO_SUPERUSER_USERNAME" ] && [ -n "$$DJANGO_SUPERUSER_PASSWORD" ]; then \
	  CREWLET_CONFIG=$(CONFIG) $(PY) manage.py createsuperuser --no-input --email "$${DJANGO_SUPERUSER_EMAIL:-$$DJANGO_SUPERUSER_USERNAME@localhost}" \
	  && echo "made the operator account $$DJANGO_SUPERUSER_USERNAME: sign in at /dashboard/"; \
	elif [ -t 0 ]; then \
	  CREWLET_CONFIG=$(CONFIG) $(PY) manage.py createsuperuser; \
	else \
	  echo "make superuser: no terminal to ask for a user name and password; without one, give them as" >&2; \
	  echo "  DJANGO_SUPERUSER_USERNAME=operator DJANGO_SUPERUSER_PASSWORD='a long password' DJANGO_SUPERUSER_EMAIL=you@example.com make superuser" >&2; \
	  exit 2; \
	fi
