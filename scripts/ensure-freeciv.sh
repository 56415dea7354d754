#!/usr/bin/env bash
# The agent's freeciv template runs Debian's freeciv-server (never a downloaded build). Install it
# from apt when it is missing; anything else is told exactly what to install.
set -euo pipefail

if [[ -x /usr/games/freeciv-server ]]; then
  exit 0
fi
if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
  echo "installing Debian's freeciv-server for the freeciv game tests"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends freeciv-server >/dev/null
  exit 0
fi
echo "The freeciv game needs Debian's freeciv-server at /usr/games/freeciv-server:" >&2
echo "  sudo apt-get install freeciv-server   (Debian/Ubuntu)" >&2
exit 1
