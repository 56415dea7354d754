# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
PG_URL ?= postgres://postgres@127.0.0.1:5432/gshost
REDIS_TEST_URL ?= redis://127.0.0.1:6379/15
# The settings file `make run` writes once and every command of the checkout reads (manage.py
# from any terminal, `gshost` run here): DEBUG=true and a SECRET_KEY of its own.
ENV_FILE ?= .env

# When this Python has pip, the virtualenv is made without one (ensurepip takes seconds) and this
# pip installs into it (`pip --python`); the test tools bring pip into it (requirements-dev.lock).
ifeq ($(shell $(PYTHON) -m pip --version >/dev/null 2>&1 && echo yes),yes)
VENV_FLAGS := --without-pip
PIP := $(PYTHON) -m pip --python $(BIN)/python
else
VENV_FLAGS :=
PIP := $(BIN)/pip
endif

.PHONY: install install-dev run test lint typecheck browser freeciv test-postgres test-sqlite bench bench-deliveries clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)

# What running needs; the test and lint tools come with install-dev. --no-compile: Python
# compiles the modules it imports when it first imports them, not the thousands it never does.
install: $(BIN)/python
	$(PIP) install --quiet --no-compile -r requirements.lock

install-dev: $(BIN)/python
	$(PIP) install --quiet -r requirements-dev.lock

# Made once, never rewritten: a new SECRET_KEY would undo every stored webhook secret.
$(ENV_FILE):
	@umask 077 && { \
	  echo "# Development settings written by make run; every manage.py command reads them."; \
	  echo "DEBUG=true"; \
	  echo "SECRET_KEY=$$($(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(50))')"; \
	} > $@.partial && mv $@.partial $@
	@echo "wrote $@ (DEBUG=true and a new SECRET_KEY)"

# Web + worker on SQLite and django-q2's ORM broker, with demo data, a local HTTPS webhook
# receiver that prints every delivery, and a local node agent running the demo's games. The
# script replaces make's shell (exec), so Ctrl-C, SIGTERM to make and a closed terminal all
# reach it, and it stops everything it started.
run: install $(ENV_FILE)
	DEBUG=true $(BIN)/python manage.py migrate --noinput
	DEBUG=true $(BIN)/python manage.py collectstatic --noinput --verbosity 0
	@echo "API: http://127.0.0.1:$(PORT)/api/public/v1/  (docs: /api/public/v1/docs/)"
	exec env DEBUG=true DEMO=1 PORT=$(PORT) PANEL_URL=http://127.0.0.1:$(PORT)/panel/keys/ \
	  ./scripts/run-web-and-worker.sh

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install-dev
	$(BIN)/mypy .

browser:
	./scripts/ensure-browser.sh

freeciv:
	./scripts/ensure-freeciv.sh

test-postgres: install-dev browser freeciv
	./scripts/ensure-services.sh
	DATABASE_URL=$(PG_URL) REDIS_URL=$(REDIS_TEST_URL) $(BIN)/python -m pytest

# The node agent has no database: its tests (tests/agent) run once, in the PostgreSQL pass.
test-sqlite: install-dev browser freeciv
	DATABASE_URL= REDIS_URL= $(BIN)/python -m pytest --ignore=tests/agent

# Lint, types, then the whole suite twice: PostgreSQL + Redis, and the embedded SQLite default.
# The suite includes the browser tests (Debian's Chromium, installed by scripts/ensure-browser.sh
# when missing), the freeciv game's tests (Debian's freeciv-server, installed by
# scripts/ensure-freeciv.sh when missing) and a schemathesis run against the served OpenAPI schema.
test: lint typecheck test-postgres test-sqlite

bench: install-dev
	./scripts/ensure-services.sh
	./scripts/ensure-wrk.sh
	$(BIN)/python bench/auth.py
	$(BIN)/python bench/deliveries.py
	$(BIN)/python bench/agent_events.py
	$(BIN)/python bench/agent_servers.py
	$(BIN)/python bench/agent_backups.py
	$(BIN)/python bench/agent_migration.py

bench-deliveries: install-dev
	./scripts/ensure-services.sh
	$(BIN)/python bench/deliveries.py

clean:
	rm -rf $(VENV) staticfiles db.sqlite3* run build dist *.egg-info
