#!/usr/bin/env bash
# `make cluster` needs Debian's HAProxy, PgBouncer and Redis, and the ip tool (iproute2):
# installs whichever is missing. The cluster starts its own instances with its own
# configuration; the packages' system services are not used.
set -euo pipefail

missing=()
command -v haproxy >/dev/null || missing+=(haproxy)
command -v pgbouncer >/dev/null || missing+=(pgbouncer)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v ip >/dev/null || missing+=(iproute2)
if ((${#missing[@]})); then
  echo "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
haproxy -v | head -n 1
pgbouncer --version | head -n 1
