#!/usr/bin/env bash
# The browser tests drive Debian's Chromium (never a downloaded browser build). Install it from
# apt when it is missing; anything else is told exactly what to install.
set -euo pipefail

if [[ -x /usr/bin/chromium ]]; then
  exit 0
fi
if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
  echo "installing Debian's chromium for the browser tests"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  exit 0
fi
echo "The browser tests need Chromium at /usr/bin/chromium:" >&2
echo "  sudo apt-get install chromium chromium-driver   (Debian/Ubuntu)" >&2
echo "or point CHROMIUM_PATH at a Chromium or Chrome binary." >&2
exit 1
