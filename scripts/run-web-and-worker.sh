#!/usr/bin/env bash
# `make run`: the demo's HTTPS webhook receiver, the django-q2 worker, the web server and (with
# DEMO=1) a local node agent running the demo organization's servers as real game processes,
# all development-only. However it is ended (Ctrl-C, SIGTERM to it or to the `make` that runs
# it, SIGHUP from a closed terminal) it stops everything within 10 s and leaves nothing behind:
# the agent first (it stops its games and reports it), then the others; each runs in a process
# group of its own, gets SIGTERM, and whatever is still there after STOP_GRACE_SECONDS gets
# SIGKILL. If one of them exits, the others are stopped too. It refuses to start, before
# touching anything, while one of its ports is taken (another `make run` still running).
#
#   PORT            web port (8000)
#   RECEIVER_PORT   the receiver's port (8443)
#   AGENT_PORT      the local agent's HTTPS port (8444)
#   AGENT_SFTP_PORT the local agent's SFTP port (2022)
#   AGENT_DATA_DIR  the local agent's data (run/demo/agent/data)
#   DEMO=1          also run `manage.py demo` with a webhook to the receiver and the node `local`
set -uo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin/python
PORT=${PORT:-8000}
RECEIVER_HOST=receiver.gshost-demo.example
RECEIVER_PORT=${RECEIVER_PORT:-8443}
RUN_DIR=${RUN_DIR:-run/demo}
STOP_GRACE_SECONDS=${STOP_GRACE_SECONDS:-6}
AGENT_PORT=${AGENT_PORT:-8444}
AGENT_SFTP_PORT=${AGENT_SFTP_PORT:-2022}
AGENT_STOP_SECONDS=3
groups=()
agent_group=""
step=""  # the pid of a one-off step (demo data, starting the servers) under way
watcher=""  # the pid of the terminal's watcher

stop_agent() {
  [[ -n "$agent_group" ]] || return 0
  kill -TERM -- "-$agent_group" 2>/dev/null
  local deadline=$((SECONDS + AGENT_STOP_SECONDS))
  while ((SECONDS < deadline)) && kill -0 -- "-$agent_group" 2>/dev/null; do sleep 0.1; done
  kill -KILL -- "-$agent_group" 2>/dev/null
  # Keepers and games run in sessions of their own: whatever the agent could not stop.
  pkill -KILL -f "gshost_agent.keeper $AGENT_DATA_DIR/" 2>/dev/null
  local proc
  for proc in /proc/[0-9]*; do
    [[ $(readlink "$proc/cwd" 2>/dev/null) == "$AGENT_DATA_DIR/servers/"* ]] && kill -KILL "${proc#/proc/}" 2>/dev/null
  done
}

stop_all() {
  trap '' INT TERM HUP
  [[ -n "$watcher" ]] && kill -TERM "$watcher" 2>/dev/null
  [[ -n "$step" ]] && kill -TERM "$step" 2>/dev/null
  stop_agent
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
  # After a closed terminal there is nowhere to write: never let that stop the stopping.
  echo "stopped web, worker, receiver and agent" 2>/dev/null
}

# setsid: a process group (and session) of its own, so its pid is the group to signal.
start() {
  setsid "$@" &
  groups+=("$!")
}

# A one-off step runs in the background and is waited for: bash runs a trap only once the
# foreground command is over, but interrupts `wait` at once.
run_step() {
  "$@" &
  step=$!
  wait "$step"
  local status=$?
  step=""
  return "$status"
}

# Waits up to $2 seconds for something on 127.0.0.1 to accept connections on port $1.
wait_for_port() {
  local deadline=$((SECONDS + $2))
  until (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# Prints those of the given ports that something on 127.0.0.1 already listens on.
taken_ports() {
  "$PY" - "$@" <<'PYTHON'
import socket, sys
for port in sys.argv[1:]:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", int(port)))
        except OSError:
            print(port)
PYTHON
}

trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM
trap 'stop_all; exit 129' HUP

# A closed terminal sends SIGHUP to its session's leader only. An interactive shell passes it
# on to this job; `make` as the leader (`ssh -t host make run`, `script -c "make run"`) only
# waits for its recipe. So while there is a terminal, it is watched, and its going is a HUP.
has_terminal() { { : >/dev/tty; } 2>/dev/null; }
if has_terminal; then
  (while has_terminal; do sleep 1; done; kill -HUP "$$") &
  watcher=$!
fi

taken=$(taken_ports "$PORT" "$RECEIVER_PORT" "$AGENT_PORT" "$AGENT_SFTP_PORT")
for setting in PORT RECEIVER_PORT AGENT_PORT AGENT_SFTP_PORT; do
  if grep -qx "${!setting}" <<<"$taken"; then
    echo "make run: port ${!setting} ($setting) is taken on 127.0.0.1" >&2
  fi
done
if [[ -n "$taken" ]]; then
  echo "make run: not started. Another make run still running? Stop it, or choose other ports" \
    "(e.g. PORT=9000 make run)." >&2
  exit 1
fi

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

# The local agent's files, under the checkout (never a predictable path in /tmp: the agent
# refuses a data directory someone else made first). Its games see their own directory only,
# inside their sandboxes; the sandbox is built as the game's own user, so every directory above
# the data directory must let others through (x), never list or write (the agent's certificate
# and keys beside it are 0600).
AGENT_DIR="$RUN_DIR/agent"
mkdir -p "$AGENT_DIR" && chmod 711 "$AGENT_DIR"
# A checkout under a directory others cannot pass (root's home is 0700) keeps the agent's data
# in root's own /var/lib instead, one directory per checkout.
passable() {
  local dir
  dir=$(cd "$1" && pwd -P)
  while [[ "$dir" != / ]]; do
    [[ $(stat -c %A "$dir") == ?????????[xt] ]] || return 1
    dir=$(dirname "$dir")
  done
}
if [[ -z "${AGENT_DATA_DIR:-}" ]]; then
  AGENT_DATA_DIR="$AGENT_DIR/data"
  if [[ $(id -u) == 0 ]] && ! passable "$AGENT_DIR"; then
    checkout_id=$(cd "$AGENT_DIR" && pwd -P | sha256sum | cut -c1-16)
    mkdir -p /var/lib/gshost-demo && chmod 711 /var/lib/gshost-demo
    AGENT_DATA_DIR="/var/lib/gshost-demo/$checkout_id"
  fi
fi
(umask 077 && mkdir -p "$AGENT_DATA_DIR")

if [[ "${DEMO:-0}" == 1 ]]; then
  "$PY" scripts/dev-agent-cert.py "$AGENT_DIR"
  DEMO_WEBHOOK_URL="https://$RECEIVER_HOST:$RECEIVER_PORT/hook" \
    DEMO_WEBHOOK_SECRET_FILE="$RUN_DIR/webhook-secret" \
    DEMO_NODE_URL="https://127.0.0.1:$AGENT_PORT" DEMO_NODE_CA_FILE="$AGENT_DIR/cert.pem" \
    DEMO_NODE_TOKEN_FILE="$AGENT_DIR/token" run_step "$PY" manage.py demo || {
    stop_all
    exit 1
  }
fi

start "$PY" manage.py qcluster
# One process with threads: the embedded default keeps rate-limit counters in local memory.
start .venv/bin/gunicorn gshost.wsgi --bind "127.0.0.1:$PORT" --workers 1 --threads 8 \
  --access-logfile - --graceful-timeout 5

if [[ "${DEMO:-0}" == 1 ]]; then
  # The node agent: it reports to the web server over loopback (plain HTTP is accepted only
  # there) and, on Ctrl-C, stops its games. Then the demo's servers are started on it.
  setsid env AGENT_TOKEN="$(cat "$AGENT_DIR/token")" AGENT_CONTROL_URL="http://127.0.0.1:$PORT" \
    AGENT_DATA_DIR="$AGENT_DATA_DIR" AGENT_BIND="127.0.0.1:$AGENT_PORT" AGENT_SFTP_PORT="$AGENT_SFTP_PORT" \
    AGENT_TLS_CERT="$AGENT_DIR/cert.pem" AGENT_TLS_KEY="$AGENT_DIR/key.pem" \
    "$PY" -m gshost_agent --stop-servers-on-exit &
  agent_group=$!
  groups+=("$agent_group")
  # Started once this agent listens: right after an earlier run, the node's last heartbeat
  # (that run's agent's) still looks fresh, and a start sent before would find no one.
  run_step wait_for_port "$AGENT_PORT" 30 || echo "the agent does not listen on $AGENT_PORT yet"
  run_step "$PY" manage.py startservers demo --wait 30 || echo "the demo's servers were not all started"
fi

wait -n
stop_all
exit 1
