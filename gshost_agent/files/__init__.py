"""Customers' files on the node: one jailed layer (`jail`) that every file route, archive job and
SFTP session goes through."""
