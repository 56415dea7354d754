"""SFTP on the agent (asyncssh): logins asked of the control plane, every operation through
the server's `Jail`, sessions closed by withdrawals. docs/files.md describes it."""
