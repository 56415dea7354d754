#!/usr/bin/env bash
# What a node needs to run every game in a sandbox, from Debian's packages: bubblewrap (mount,
# PID and IPC namespaces), iproute2 (a network namespace and a veth pair per game), iptables
# (the game's port forwarded from the node's address), util-linux's setpriv and nsenter, and a
# filesystem per server (e2fsprogs' mkfs.ext4, e2fsck, resize2fs; mount's mount and umount).
# Installed from apt when missing; anything else is told exactly what to install.
set -euo pipefail

missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v iptables >/dev/null || missing+=(iptables)
command -v ip >/dev/null || missing+=(iproute2)
{ command -v setpriv >/dev/null && command -v nsenter >/dev/null; } || missing+=(util-linux)
{ command -v mkfs.ext4 >/dev/null && command -v resize2fs >/dev/null; } || missing+=(e2fsprogs)
command -v umount >/dev/null || missing+=(mount)
((${#missing[@]})) || exit 0

if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
  echo "installing what a node needs to sandbox its games: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  exit 0
fi
echo "A node sandboxes its games with: ${missing[*]}" >&2
echo "  sudo apt-get install ${missing[*]}   (Debian/Ubuntu)" >&2
exit 1
