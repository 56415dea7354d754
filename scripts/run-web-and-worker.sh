#!/usr/bin/env bash
# Runs the django-q2 worker in the background and the web server in the foreground;
# stopping one (Ctrl-C) stops both.
set -euo pipefail
cd "$(dirname "$0")/.."

.venv/bin/python manage.py qcluster &
worker=$!
trap 'kill "$worker" 2>/dev/null || true; wait "$worker" 2>/dev/null || true' EXIT INT TERM

# One process with threads: the embedded default keeps rate-limit counters in local memory.
.venv/bin/gunicorn gshost.wsgi --bind "127.0.0.1:${PORT:-8000}" --workers 1 --threads 8 \
  --access-logfile - --graceful-timeout 5
