# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
PG_URL ?= postgres://postgres@127.0.0.1:5432/gshost
REDIS_TEST_URL ?= redis://127.0.0.1:6379/15

.PHONY: install run test lint typecheck browser freeciv test-postgres test-sqlite bench bench-deliveries clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -r requirements.lock

# Web + worker on SQLite and django-q2's ORM broker, with demo data and a local HTTPS webhook
# receiver that prints every delivery. Ctrl-C stops all three. `make run S3=1` also runs a
# local S3 server (SeaweedFS) that backups go to (scripts/with-local-s3.py).
run: install
	DEBUG=true $(BIN)/python manage.py migrate --noinput
	DEBUG=true $(BIN)/python manage.py collectstatic --noinput --verbosity 0
	@echo "API: http://127.0.0.1:$(PORT)/api/public/v1/  (docs: /api/public/v1/docs/)"
	DEBUG=true DEMO=1 PORT=$(PORT) PANEL_URL=http://127.0.0.1:$(PORT)/panel/keys/ \
	  $(if $(S3),$(BIN)/python scripts/with-local-s3.py) ./scripts/run-web-and-worker.sh

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy .

browser:
	./scripts/ensure-browser.sh

freeciv:
	./scripts/ensure-freeciv.sh

test-postgres: install browser freeciv
	./scripts/ensure-services.sh
	DATABASE_URL=$(PG_URL) REDIS_URL=$(REDIS_TEST_URL) $(BIN)/python -m pytest

# The node agent has no database: its tests (tests/agent) run once, in the PostgreSQL pass.
test-sqlite: install browser freeciv
	DATABASE_URL= REDIS_URL= $(BIN)/python -m pytest --ignore=tests/agent

# Lint, types, then the whole suite twice: PostgreSQL + Redis, and the embedded SQLite default.
# The suite includes the browser tests (Debian's Chromium, installed by scripts/ensure-browser.sh
# when missing), the freeciv game's tests (Debian's freeciv-server, installed by
# scripts/ensure-freeciv.sh when missing) and a schemathesis run against the served OpenAPI schema.
test: lint typecheck test-postgres test-sqlite

bench: install
	./scripts/ensure-services.sh
	./scripts/ensure-wrk.sh
	$(BIN)/python bench/auth.py
	$(BIN)/python bench/deliveries.py
	$(BIN)/python bench/agent_events.py
	$(BIN)/python bench/agent_servers.py
	$(BIN)/python bench/agent_backups.py
	$(BIN)/python bench/agent_migration.py

bench-deliveries: install
	./scripts/ensure-services.sh
	$(BIN)/python bench/deliveries.py

clean:
	rm -rf $(VENV) staticfiles db.sqlite3* run build dist *.egg-info
