"""The agent's SSH host key: ed25519, made at first start, kept in the data directory
(`<data>/sftp/host_key`, 0600 root), the same for every later start so clients keep
trusting it."""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh

from gshost_agent.layout import UnsafeDirectory, check_owned

KEY_FILE = "host_key"


def host_key(directory: Path) -> asyncssh.SSHKey:
    """The host key kept in `directory`, made (with the directory, 0700) when missing."""
    check_owned(directory)  # the agent's own, not a link (UnsafeDirectory otherwise)
    directory.mkdir(mode=0o700, exist_ok=True)
    check_owned(directory)  # made meanwhile by someone else
    os.chmod(directory, 0o700)
    path = directory / KEY_FILE
    if path.is_symlink():
        raise UnsafeDirectory(path, "the host key is a link")
    if not path.exists():
        key = asyncssh.generate_private_key("ssh-ed25519")
        partial = path.with_suffix(".partial")
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(key.export_private_key("openssh"))
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, path)
    return asyncssh.read_private_key(str(path))


def fingerprint(key: asyncssh.SSHKey) -> str:
    """`SHA256:…`, as `ssh-keygen -l` and an SFTP client's first connection show it."""
    return str(key.get_fingerprint("sha256"))
