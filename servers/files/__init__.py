"""A server's files through its node's agent (docs/files.md): every route of the API and the
panel's file manager calls these services, which call the agent after any write of ours."""
