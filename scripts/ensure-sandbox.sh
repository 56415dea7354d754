#!/usr/bin/env bash
# What a node needs to run every game in a sandbox, from Debian's packages: bubblewrap (mount,
# PID and IPC namespaces), iproute2 (a network namespace and a veth pair per game), iptables
# and ip6tables (the game's port forwarded from the node's address, and the rest sealed, IPv6
# included), util-linux's setpriv and nsenter, libseccomp2 (the agent builds each game's
# seccomp filter with it) and a filesystem per server (e2fsprogs' mkfs.ext4, e2fsck,
# resize2fs; mount's mount and umount).
# Installed from apt when missing; anything else is told exactly what to install.
set -euo pipefail

missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
{ command -v iptables >/dev/null && command -v ip6tables >/dev/null; } || missing+=(iptables)
command -v ip >/dev/null || missing+=(iproute2)
{ command -v setpriv >/dev/null && command -v nsenter >/dev/null; } || missing+=(util-linux)
ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2 ' || missing+=(libseccomp2)
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
