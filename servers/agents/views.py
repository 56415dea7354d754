"""The routes agents call: POST /internal/nodes/heartbeat, /reports and /backup-parts.

Outside the public API (not audited as customer calls, no session, no CSRF): the caller is a
node, known by its bearer token. Bodies are JSON objects of at most 64 KiB (a heartbeat 4 MiB),
read as the protocol's messages (`gshost_agent.protocol`): a body that is not one is 400
`invalid_request` naming the field, never a 5xx. docs/agent-protocol.md describes them.
Refusals (a `ProtocolError` as `InvalidNodeRequest`) are domain errors or `ApiError`s,
answered by `gshost.api.errors` as every API route's are.
"""

import copy
import hashlib
import ipaddress
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from gshost import process_state
from gshost.api import rate_limits
from gshost.api.client_ip import client_ip
from gshost.api.errors import (
    ApiError,
    ErrorCode,
    as_api_error,
    invalid_request,
    json_error_response,
)
from gshost.errors import DomainError, Misuse
from gshost.ids import format_timestamp
from gshost_agent.protocol import (
    ConsoleChecks,
    Heartbeat,
    HeartbeatAnswer,
    PartUrls,
    PartUrlsRequest,
    ProtocolError,
    Report,
)
from servers.agents.console_commands import console_command_from_socket
from servers.agents.console_tokens import panel_origins, published_keys
from servers.agents.reports import node_heartbeat, node_report_apply
from servers.agents.withdrawal_push import withdrawals_pending
from servers.backups.storage import backup_part_urls
from servers.errors import InvalidNodeRequest, NodeTokenChanged
from servers.fleet.nodes import node_by_token, token_hash
from servers.models import Node

MAX_BODY_BYTES = 64 * 1024
# A heartbeat names every server of the node, with the readings of those that run.
MAX_HEARTBEAT_BYTES = 4 * 1024 * 1024


NodeView = Callable[[HttpRequest, Node, dict[str, Any]], HttpResponse]


def node_route(
    view: NodeView, max_bytes: int = MAX_BODY_BYTES
) -> Callable[[HttpRequest], HttpResponse]:
    """POST only; the node from its token (401 otherwise); then the JSON object body."""

    @csrf_exempt
    @never_cache
    def wrapper(request: HttpRequest) -> HttpResponse:
        node = None
        try:
            node, body = _checked(request, max_bytes)
            answer = view(request, node, body)
            _known_nodes.remember(node)
            return answer
        except NodeTokenChanged:
            if node is not None:
                _known_nodes.forget(node)
            return json_error_response(_refused(request))
        except Misuse:
            raise  # a bug: Django logs it and answers 500
        except ProtocolError as error:  # the body is not the route's message
            refused = InvalidNodeRequest(error.field, error.message)
            return json_error_response(as_api_error(refused))
        except (ApiError, DomainError) as error:
            return json_error_response(as_api_error(error))

    wrapper.__name__ = view.__name__
    return wrapper


def _checked(request: HttpRequest, max_bytes: int) -> tuple[Node, dict[str, Any]]:
    """The calling node and its JSON object body; NodeTokenChanged for a token of no node."""
    if request.method != "POST":
        raise ApiError(405, ErrorCode.METHOD_NOT_ALLOWED, "Use POST.", headers={"Allow": "POST"})
    node = _node_of(request)
    if node is None:
        raise NodeTokenChanged()
    raw = _read_body(request, max_bytes)
    if raw is None:
        message = f"The body is larger than {max_bytes} bytes."
        raise ApiError(413, ErrorCode.PAYLOAD_TOO_LARGE, message)
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise invalid_request("The body must be a JSON object.") from None
    if not isinstance(body, dict):
        raise invalid_request("The body must be a JSON object.")
    return node, body


def _refused(request: HttpRequest) -> ApiError:
    """401, or 429 once this address has failed too often this minute (as the API does)."""
    limit = rate_limits.parse_rate(settings.AUTH_FAILURE_RATE)
    state = rate_limits.hit(f"nodeauthfail:{client_ip(request)}", limit)
    if state.exceeded:
        return ApiError(
            429,
            ErrorCode.RATE_LIMITED,
            "Too many failed authentications; retry later.",
            headers={"Retry-After": str(state.retry_after)},
            retry_after=state.retry_after,
        )
    return ApiError(401, ErrorCode.INVALID_TOKEN, "Send the node token as Authorization: Bearer.")


def _node_of(request: HttpRequest) -> Node | None:
    scheme, _, token = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme != "Bearer" or not token.strip():
        return None
    return _known_nodes.node(token.strip())


class _KnownNodes:
    """Which node a token is, remembered by each web process (by the token's hash): every
    node calls every 10 s, and finding it was most of a heartbeat's cost. Safe to remember:
    every write a call makes checks that the token is still the node's (NodeTokenChanged),
    so a rotated token changes nothing, and is forgotten at its first try."""

    KEPT = 10_000
    SECONDS = 600.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: OrderedDict[str, tuple[float, Node]] = OrderedDict()

    def node(self, token: str) -> Node | None:
        digest, now = token_hash(token), time.monotonic()
        with self._lock:
            known = self._nodes.get(digest)
            if known is not None and known[0] > now:
                self._nodes.move_to_end(digest)
                return copy.copy(known[1])
        node = node_by_token(token)
        if node is not None:
            with self._lock:
                self._nodes[digest] = (now + self.SECONDS, copy.copy(node))
                while len(self._nodes) > self.KEPT:
                    self._nodes.popitem(last=False)
        return node

    def remember(self, node: Node) -> None:
        """The node as a call left it (what its heartbeat wrote), until its entry expires."""
        with self._lock:
            known = self._nodes.get(node.token_hash or "")
            if known is not None and known[1].id == node.id:
                self._nodes[node.token_hash or ""] = (known[0], copy.copy(node))

    def forget(self, node: Node) -> None:
        with self._lock:
            self._nodes.pop(node.token_hash or "", None)

    def clear(self) -> None:
        with self._lock:
            self._nodes.clear()


_known_nodes = _KnownNodes()


def _read_body(request: HttpRequest, max_bytes: int) -> bytes | None:
    """The body, or None when it is larger than `max_bytes` (read no further than that)."""
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit() or int(declared) > max_bytes:
        return None
    raw = request.read(max_bytes + 1)
    return None if len(raw) > max_bytes else raw


class _LastServers:
    """Per node, a digest of the servers its last heartbeat to this process listed: our
    comparison with them (only for the log) runs when they change, not every 10 s."""

    KEPT = 10_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._digests: OrderedDict[int, bytes] = OrderedDict()

    def changed(self, node: Node, servers: dict[str, str]) -> bool:
        digest = hashlib.blake2b(json.dumps(servers, sort_keys=True).encode(), digest_size=16)
        with self._lock:
            if self._digests.get(node.id) == digest.digest():
                self._digests.move_to_end(node.id)
                return False
            self._digests[node.id] = digest.digest()
            while len(self._digests) > self.KEPT:
                self._digests.popitem(last=False)
        return True

    def clear(self) -> None:
        with self._lock:
            self._digests.clear()


_last_servers = _LastServers()


def _forget_nodes() -> None:
    _known_nodes.clear()
    _last_servers.clear()


process_state.register(
    "servers.agents.views",
    bound=f"at most {_KnownNodes.KEPT:,} nodes by their token's hash, each for "
    f"{_KnownNodes.SECONDS:.0f} s, and a digest of the servers each last listed",
    reset=_forget_nodes,
)


# The routes


def _heartbeat(request: HttpRequest, node: Node, body: dict[str, Any]) -> HttpResponse:
    heartbeat = Heartbeat.from_json(body)
    servers = {server_id: str(state) for server_id, state in heartbeat.servers.items()}
    changed = _last_servers.changed(node, servers)
    withdrawals_wait = node_heartbeat(node=node, heartbeat=heartbeat, servers_changed=changed)
    taken = list(heartbeat.withdrawals_taken)
    answer = HeartbeatAnswer(
        node=node.name,
        # What the node's console websocket checks (docs/console.md).
        console=ConsoleChecks(keys=tuple(published_keys()), origins=tuple(panel_origins())),
        withdrawals=tuple(withdrawals_pending(node=node, taken=taken) if withdrawals_wait else ()),
    )
    return JsonResponse(answer.to_json())


heartbeat = node_route(_heartbeat, MAX_HEARTBEAT_BYTES)
heartbeat.__name__ = "heartbeat"


@node_route
def console_commands(request: HttpRequest, node: Node, body: dict[str, Any]) -> HttpResponse:
    """A command typed into one of the node's console sockets (servers.agents.console_commands)."""
    token, command = body.get("token"), body.get("command")
    if not isinstance(token, str) or not 0 < len(token) <= 4096:
        raise InvalidNodeRequest("token", "token must be the socket's console token.")
    if not isinstance(command, str):
        raise InvalidNodeRequest("command", "command must be a string.")
    ip, agent = body.get("ip"), body.get("user_agent") or ""
    sent = console_command_from_socket(
        node=node,
        token=token,
        command=command,
        ip=ip if isinstance(ip, str) and _is_ip(ip) else None,
        user_agent=agent if isinstance(agent, str) else "",
    )
    return JsonResponse(
        {"command": sent.command, "sent_at": format_timestamp(sent.sent_at)}, status=202
    )


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@node_route
def reports(request: HttpRequest, node: Node, body: dict[str, Any]) -> HttpResponse:
    report = Report.from_json(body)
    node_report_apply(node=node, report=report)
    return JsonResponse({"acknowledged": report.seq})


@node_route
def backup_parts(request: HttpRequest, node: Node, body: dict[str, Any]) -> HttpResponse:
    """Presigned URLs of the next parts of a backup's upload, for the node making it."""
    asked = PartUrlsRequest.from_json(body)
    urls = backup_part_urls(
        node=node, backup_id=asked.backup_id, first=asked.first, count=asked.count
    )
    return JsonResponse(PartUrls(tuple(urls)).to_json())
