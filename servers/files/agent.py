"""The calls to a node's file routes (gshost_agent.files.routes), and their answers in our
errors. Each names the server's game and disk plan: the node keeps neither for a server it has
not run. A call that may take long on the node (an archive, a pull, a copy) takes no slot of
the node's (servers.agents.calls): other calls about the node do not wait behind it."""

import json
from typing import Any
from urllib.parse import quote

from gshost.errors import InvalidState
from servers.agents.runtime import agent_call_raw
from servers.errors import NodeUnavailable
from servers.files.errors import AGENT_CODES, PASSED_ON
from servers.models import Server
from servers.runtime import host_traits

CONTENT_LIMIT = 8 * 1024 * 1024


def files_call(
    server: Server,
    method: str,
    action: str = "",
    *,
    params: dict[str, str] | None = None,
    body: dict[str, Any] | None = None,
    data: bytes | None = None,
    long: bool = False,
) -> bytes:
    """The agent's answer body (2xx), or its refusal raised as ours."""
    node = server.node
    if not host_traits(node).serves_files:
        raise InvalidState(
            "This server is on a simulated node: files are served by agent nodes only."
        )
    path = f"/v1/servers/{quote(server.id, safe='')}/files" + (f"/{action}" if action else "")
    query = {"game": server.game, "disk_mb": str(server.disk_mb), **(params or {})}
    status, raw = agent_call_raw(
        node, method, path, body=body, data=data, params=query,
        takes_slot=not long, max_bytes=CONTENT_LIMIT + 64 * 1024,
    )  # fmt: skip
    if status < 300:
        return raw
    raise refusal(node.name, status, raw)


def files_json(server: Server, method: str, action: str = "", **given: Any) -> dict[str, Any]:
    answer = json.loads(files_call(server, method, action, **given) or b"{}")
    if not isinstance(answer, dict):
        raise NodeUnavailable(server.node.name, "its agent answered something unexpected")
    return answer


def refusal(node_name: str, status: int, raw: bytes) -> Exception:
    try:
        error = json.loads(raw).get("error", {})
    except (ValueError, AttributeError):
        error = {}
    kind = AGENT_CODES.get(str(error.get("code", ""))) if isinstance(error, dict) else None
    if kind is None or status >= 500:
        return NodeUnavailable(node_name, f"its agent answered {status}")
    extra = {name: error[name] for name in PASSED_ON if name in error}
    return kind(str(error.get("message", ""))[:300] or None, **extra)
