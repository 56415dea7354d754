#!/usr/bin/env bash
# The SFTP benchmark (bench/files_sftp.py) compares the agent's SFTP with OpenSSH's own
# sftp-server, under an sshd it starts on a free port. Install Debian's openssh-server when it
# is missing, without starting the system's sshd; anything else is told what to install.
set -euo pipefail

if [[ -x /usr/sbin/sshd && -x /usr/lib/openssh/sftp-server ]]; then
  exit 0
fi
if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
  echo "installing openssh-server for the SFTP benchmark (the system's sshd is not started)"
  policy=/usr/sbin/policy-rc.d
  made_policy=""
  if [[ ! -e $policy ]]; then  # no service is started by the package's scripts
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    openssh-server >/dev/null
  [[ -n $made_policy ]] && rm -f "$policy"
  exit 0
fi
echo "The SFTP benchmark needs OpenSSH's server (sshd and sftp-server):" >&2
echo "  sudo apt-get install openssh-server   (Debian/Ubuntu)" >&2
exit 1
