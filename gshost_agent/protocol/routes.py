"""The routes' paths: the agent's (called by the control plane) and the control plane's (called
by agents). Each is spelled here once; the builders quote the server id."""

from __future__ import annotations

from urllib.parse import quote

# The agent's API.
NODE_ROUTE = "/v1/node"
SERVER_ROUTE = "/v1/servers/{server_id}"  # the pattern; `server_route` builds one
TRANSFER_ROUTE = "/v1/transfers/{server_id}"  # the pattern; `transfer_route` builds one

# The control plane's routes for agents.
HEARTBEAT_ROUTE = "/internal/nodes/heartbeat"
REPORTS_ROUTE = "/internal/nodes/reports"
BACKUP_PARTS_ROUTE = "/internal/nodes/backup-parts"


def _route(pattern: str, server_id: str, action: str) -> str:
    path = pattern.format(server_id=quote(server_id, safe=""))
    return f"{path}/{action}" if action else path


def server_route(server_id: str, action: str = "") -> str:
    """`/v1/servers/<id>` and, with an action, `/v1/servers/<id>/<action>` (start, stop,
    restart, kill, console, players, stats, metrics, settings, jobs, transfer)."""
    return _route(SERVER_ROUTE, server_id, action)


def transfer_route(server_id: str, action: str = "") -> str:
    """`/v1/transfers/<id>` and, with an action, `/v1/transfers/<id>/<action>` (archive,
    fetch, commit)."""
    return _route(TRANSFER_ROUTE, server_id, action)
