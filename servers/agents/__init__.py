"""Agent nodes: the control plane's side of `gshost-agent` (docs/agent-protocol.md).

Calls to an agent: `runtime` (the `Runtime` of agent nodes: every request an HTTPS call, made
after commit) and `calls` (its deadline, the fail-fast mark and the slot per node). What agents
send: `views` + `urls` (the routes under /internal/nodes/), `reports` (heartbeats and reports,
applied once and in order), `last_readings` (each heartbeat's stats, players and settings file,
cached), `minutes` (the per-minute readings, stored 24 h: metrics) and `console_mirror` (the
console lines last fetched). Between nodes: `transfers` (a move, data and all) and `rebuild`
(a lost node's server rebuilt elsewhere from its backup in the bucket).
"""
