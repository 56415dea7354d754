#!/usr/bin/env bash
# `make run`: the demo's HTTPS webhook receiver, the django-q2 worker and the web server, all
# development-only. Ctrl-C (or SIGTERM) stops the three within 10 s and leaves nothing behind:
# each runs in a process group of its own, gets SIGTERM, and whatever is still there after
# STOP_GRACE_SECONDS gets SIGKILL. If one of them exits, the others are stopped too.
#
#   PORT           web port (8000)
#   RECEIVER_PORT  the receiver's port (8443)
#   DEMO=1         also run `manage.py demo` with a webhook to the receiver
set -uo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin/python
PORT=${PORT:-8000}
RECEIVER_HOST=receiver.gshost-demo.example
RECEIVER_PORT=${RECEIVER_PORT:-8443}
RUN_DIR=${RUN_DIR:-run/demo}
STOP_GRACE_SECONDS=${STOP_GRACE_SECONDS:-6}
groups=()

stop_all() {
  trap '' INT TERM
  for group in "${groups[@]}"; do kill -TERM -- "-$group" 2>/dev/null; done
  local deadline=$((SECONDS + STOP_GRACE_SECONDS))
  while ((SECONDS < deadline)); do
    local alive=0
    for group in "${groups[@]}"; do kill -0 -- "-$group" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.2
  done
  for group in "${groups[@]}"; do kill -KILL -- "-$group" 2>/dev/null; done
  wait 2>/dev/null
  echo "stopped web, worker and receiver"
}

# setsid: a process group (and session) of its own, so its pid is the group to signal.
start() {
  setsid "$@" &
  groups+=("$!")
}

trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM

mkdir -p "$RUN_DIR"
RUN_DIR=$(cd "$RUN_DIR" && pwd)
rm -f "$RUN_DIR/ca.pem"
start "$PY" -u -m gshost.demo_receiver --host "$RECEIVER_HOST" --port "$RECEIVER_PORT" \
  --ca-file "$RUN_DIR/ca.pem" --secret-file "$RUN_DIR/webhook-secret"
for _ in $(seq 1 50); do [[ -s "$RUN_DIR/ca.pem" ]] && break; sleep 0.1; done

# Development only: trust the receiver's CA, let its name resolve to loopback, and exempt
# loopback from the send-time address check. Never set these three in production.
export WEBHOOK_CA_BUNDLE="$RUN_DIR/ca.pem"
export WEBHOOK_ALLOWED_NETWORKS=127.0.0.1/32
export DEV_WEBHOOK_LOOPBACK_HOSTS=$RECEIVER_HOST
export DEBUG=${DEBUG:-true}

if [[ "${DEMO:-0}" == 1 ]]; then
  DEMO_WEBHOOK_URL="https://$RECEIVER_HOST:$RECEIVER_PORT/hook" \
    DEMO_WEBHOOK_SECRET_FILE="$RUN_DIR/webhook-secret" "$PY" manage.py demo || {
    stop_all
    exit 1
  }
fi

start "$PY" manage.py qcluster
# One process with threads: the embedded default keeps rate-limit counters in local memory.
start .venv/bin/gunicorn gshost.wsgi --bind "127.0.0.1:$PORT" --workers 1 --threads 8 \
  --access-logfile - --graceful-timeout 5

wait -n
stop_all
exit 1
