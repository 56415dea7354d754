#!/usr/bin/env bash
# The HTTP benchmarks need wrk. Install it from apt when it is missing; anything else is told
# exactly what to install.
set -euo pipefail

if command -v wrk >/dev/null; then
  exit 0
fi
if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
  echo "installing wrk for the benchmarks"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
  exit 0
fi
echo "The benchmarks need the HTTP load generator wrk:" >&2
echo "  sudo apt-get install wrk   (Debian/Ubuntu)     brew install wrk   (macOS)" >&2
exit 1
