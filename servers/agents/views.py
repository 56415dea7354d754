"""The routes agents call: POST /internal/nodes/heartbeat and /internal/nodes/reports.

Outside the public API (not audited as customer calls, no session, no CSRF): the caller is a
node, known by its bearer token. Bodies are JSON objects of at most 64 KiB, validated
strictly: a bad one is 400, never a 5xx. docs/agent-protocol.md describes both. Refusals are
domain errors or `ApiError`s, answered by `gshost.api.errors` as every API route's are.
"""

import copy
import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
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
from gshost_agent.protocol import JOB_REPORTS, ReportKind, ServerState, last_output
from servers.agents.minutes import Minute, parse_minutes
from servers.agents.reports import (
    Capacity,
    JobReport,
    Report,
    node_heartbeat,
    node_report_apply,
)
from servers.backups.object_storage import MAX_PARTS
from servers.backups.storage import MAX_URLS_PER_ASK, backup_part_urls
from servers.errors import InvalidNodeRequest, NodeTokenChanged
from servers.fleet.nodes import node_by_token, token_hash
from servers.game.capabilities import Capability
from servers.lifecycle import CrashDetails
from servers.models import Node

MAX_BODY_BYTES = 64 * 1024
CRASH_REASONS = ("exited", "disk_limit")  # a `crashed` report's reason
# A heartbeat names every server of the node, with the readings of those that run.
MAX_HEARTBEAT_BYTES = 4 * 1024 * 1024
MAX_SERVERS_IN_HEARTBEAT = 10_000
_SERVER_ID = re.compile(r"srv_[0-9A-Za-z]{1,40}")
_JOB_ID = re.compile(r"job_[0-9A-Za-z]{1,40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_BACKUP_ID = re.compile(r"bkp_[0-9A-Za-z]{1,40}")
_OUTBOX_ID = re.compile(r"[0-9A-Za-z_.:-]{1,100}")


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


# Field checks: each names the field and what it must be.


def _text(body: dict[str, Any], field: str, pattern: re.Pattern[str] | None = None) -> str:
    value = body.get(field)
    if not isinstance(value, str) or (pattern is not None and not pattern.fullmatch(value)):
        raise InvalidNodeRequest(
            field, f"{field} must be a string{' of the expected form' * bool(pattern)}."
        )
    return value


def _optional_int(body: dict[str, Any], field: str) -> int | None:
    value = body.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > 2**31:
        raise InvalidNodeRequest(field, f"{field} must be an integer or null.")
    return value


def _timestamp(body: dict[str, Any], field: str) -> datetime | None:
    value = body.get(field)
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise InvalidNodeRequest(
            field, f"{field} must be an ISO 8601 time with its offset, or null."
        )
    return moment


def _last_output(body: dict[str, Any]) -> tuple[str, ...]:
    value = body.get("last_output", [])
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(line, str) for line in value):
        raise InvalidNodeRequest("last_output", "last_output must be a list of strings.")
    return tuple(last_output([_printable(line) for line in value]))


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _printable(line: str) -> str:
    """A game's output as text a database and a webhook receiver take: no NUL or other
    control character (a tab stays), no lone surrogate."""
    text = line.encode("utf-8", "replace").decode("utf-8")
    return _CONTROL.sub("", text)


def parse_report(body: dict[str, Any]) -> Report:
    seq = body.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq < 2**62:
        raise InvalidNodeRequest("seq", "seq must be a positive integer.")
    kind = body.get("kind")
    if not isinstance(kind, str) or kind not in set(ReportKind):
        raise InvalidNodeRequest("kind", f"kind must be one of {', '.join(ReportKind)}.")
    oom = body.get("oom", False)
    if not isinstance(oom, bool):
        raise InvalidNodeRequest("oom", "oom must be true or false.")
    reason = body.get("reason") or "exited"
    if reason not in CRASH_REASONS:
        raise InvalidNodeRequest(
            "reason", f"reason must be one of {', '.join(CRASH_REASONS)}, or null."
        )
    return Report(
        outbox_id=_text(body, "outbox_id", _OUTBOX_ID),
        seq=seq,
        server_id=_text(body, "server_id", _SERVER_ID),
        kind=ReportKind(kind),
        at=_timestamp(body, "at"),
        pid=_optional_int(body, "pid"),
        exit_code=_optional_int(body, "exit_code"),
        crash=CrashDetails(
            signal=_optional_int(body, "signal"),
            oom=oom,
            last_output=_last_output(body),
            reason=reason,
        ),
        job=_job(body, ReportKind(kind)) if kind in JOB_REPORTS else None,
    )


def _job(body: dict[str, Any], kind: ReportKind) -> JobReport:
    job_id = _text(body, "job_id", _JOB_ID)
    if kind == ReportKind.JOB_PROGRESS:
        progress = body.get("progress")
        if isinstance(progress, bool) or not isinstance(progress, int) or not 0 <= progress <= 100:
            raise InvalidNodeRequest("progress", "progress must be an integer from 0 to 100.")
        return JobReport(job_id=job_id, progress=progress)
    succeeded = body.get("succeeded")
    if not isinstance(succeeded, bool):
        raise InvalidNodeRequest("succeeded", "succeeded must be true or false.")
    error = body.get("error")
    if error is not None and not isinstance(error, str):
        raise InvalidNodeRequest("error", "error must be a string or null.")
    size = body.get("size_bytes")
    if size is not None and (
        isinstance(size, bool) or not isinstance(size, int) or not 0 <= size < 2**63
    ):
        raise InvalidNodeRequest("size_bytes", "size_bytes must be a non-negative integer or null.")
    sha256 = body.get("sha256")
    if sha256 is not None and (not isinstance(sha256, str) or not _SHA256.fullmatch(sha256)):
        raise InvalidNodeRequest("sha256", "sha256 must be 64 lowercase hex digits or null.")
    return JobReport(
        job_id=job_id,
        succeeded=succeeded,
        error=_printable(error or "")[:500],
        size_bytes=size,
        sha256=sha256 or "",
    )


_GAME_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")  # a template's name (gshost_agent.templates)
MAX_GAMES_IN_HEARTBEAT = 500
MAX_CAPACITY_VALUE = 2**31 - 1
KNOWN_CAPABILITIES = frozenset(capability.value for capability in Capability)
MAX_CAPABILITIES = 100


def _isolation(body: dict[str, Any]) -> str | None:
    """How the node seals its games off, in its agent's words; None from one that does not
    say."""
    value = body.get("isolation")
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 100 or not value.isprintable():
        raise InvalidNodeRequest(
            "isolation", "isolation must be a string of at most 100 characters."
        )
    return value


def _games(body: dict[str, Any]) -> list[str] | None:
    """The node's templates; None from an agent that does not list them."""
    value = body.get("games")
    if value is None:
        return None
    message = "games is a list of template names."
    if not isinstance(value, list) or len(value) > MAX_GAMES_IN_HEARTBEAT:
        raise InvalidNodeRequest("games", message)
    if not all(isinstance(game, str) and _GAME_NAME.fullmatch(game) for game in value):
        raise InvalidNodeRequest("games", message)
    return sorted(set(value))


def _game_capabilities(body: dict[str, Any]) -> dict[str, list[str]] | None:
    """Each template's capabilities; None from an agent that does not list them. A capability
    this control plane does not know (a newer agent's) is left out."""
    value = body.get("game_capabilities")
    if value is None:
        return None
    message = "game_capabilities maps template names to lists of capabilities."
    if not isinstance(value, dict) or len(value) > MAX_GAMES_IN_HEARTBEAT:
        raise InvalidNodeRequest("game_capabilities", message)
    found = {}
    for game, listed in value.items():
        if not _GAME_NAME.fullmatch(game) or not isinstance(listed, list):
            raise InvalidNodeRequest("game_capabilities", message)
        if len(listed) > MAX_CAPABILITIES or not all(isinstance(c, str) for c in listed):
            raise InvalidNodeRequest("game_capabilities", message)
        found[game] = sorted(set(listed) & KNOWN_CAPABILITIES)
    return dict(sorted(found.items()))


def _capacity(body: dict[str, Any]) -> Capacity:
    """What the agent's machine offers; each figure null where it cannot tell."""
    value = body.get("capacity") or {}
    if not isinstance(value, dict):
        raise InvalidNodeRequest(
            "capacity", "capacity is an object of memory_mb, disk_mb, cpu_percent."
        )
    figures: dict[str, int | None] = {}
    for key in ("memory_mb", "disk_mb", "cpu_percent"):
        figure = value.get(key)
        if figure is not None and (
            isinstance(figure, bool)
            or not isinstance(figure, int)
            or not 0 <= figure <= MAX_CAPACITY_VALUE
        ):
            raise InvalidNodeRequest(
                "capacity", f"capacity.{key} must be a non-negative integer or null."
            )
        figures[key] = figure
    return Capacity(**figures)


def _servers(body: dict[str, Any]) -> dict[str, str]:
    value = body.get("servers")
    message = "servers maps server ids to states."
    if not isinstance(value, dict) or len(value) > MAX_SERVERS_IN_HEARTBEAT:
        raise InvalidNodeRequest("servers", message)
    for server_id, state in value.items():
        if not isinstance(server_id, str) or not _SERVER_ID.fullmatch(server_id):
            raise InvalidNodeRequest("servers", message)
        if state not in set(ServerState):
            raise InvalidNodeRequest("servers", message)
    return value


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


def _readings(body: dict[str, Any]) -> dict[str, Any]:
    """The readings as sent: checked only for their shape here (one cache write keeps them);
    each is checked when it is read (`servers.agents.last_readings`)."""
    value = body.get("readings") or {}
    if not isinstance(value, dict) or len(value) > MAX_SERVERS_IN_HEARTBEAT:
        raise InvalidNodeRequest("readings", "readings maps server ids to objects.")
    return value


def _minutes(readings: dict[str, Any]) -> dict[str, list[Minute]]:
    """The readings' completed minutes, checked strictly here: they are stored."""
    minutes = parse_minutes(readings)
    if not all(_SERVER_ID.fullmatch(server_id) for server_id in minutes):
        raise InvalidNodeRequest(
            "minutes", "minutes are sent in the readings of server ids (srv_…)."
        )
    return minutes


# The routes


def _heartbeat(request: HttpRequest, node: Node, body: dict[str, Any]) -> HttpResponse:
    version = body.get("agent_version")
    if not isinstance(version, str) or len(version) > 100 or not version.isprintable():
        raise InvalidNodeRequest(
            "agent_version", "agent_version must be a string of at most 100 characters."
        )
    outbox_id = body.get("outbox_id")
    if outbox_id is not None:
        _text(body, "outbox_id", _OUTBOX_ID)
    servers = _servers(body)
    compared = servers if _last_servers.changed(node, servers) else {}
    readings = _readings(body)
    node_heartbeat(
        node=node,
        agent_version=version,
        servers=compared,
        games=_games(body),
        game_capabilities=_game_capabilities(body),
        capacity=_capacity(body),
        isolation=_isolation(body),
        readings=readings,
        minutes=_minutes(readings),
    )
    return JsonResponse({"node": node.name})


heartbeat = node_route(_heartbeat, MAX_HEARTBEAT_BYTES)
heartbeat.__name__ = "heartbeat"


@node_route
def reports(request: HttpRequest, node: Node, body: dict[str, Any]) -> HttpResponse:
    report = parse_report(body)
    node_report_apply(node=node, report=report)
    return JsonResponse({"acknowledged": report.seq})


def _bounded_int(body: dict[str, Any], field: str, highest: int) -> int:
    value = body.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= highest:
        raise InvalidNodeRequest(field, f"{field} must be an integer from 1 to {highest}.")
    return value


@node_route
def backup_parts(request: HttpRequest, node: Node, body: dict[str, Any]) -> HttpResponse:
    """Presigned URLs of the next parts of a backup's upload, for the node making it."""
    backup_id = _text(body, "backup_id", _BACKUP_ID)
    first = _bounded_int(body, "first", MAX_PARTS)
    count = _bounded_int(body, "count", MAX_URLS_PER_ASK)
    urls = backup_part_urls(node=node, backup_id=backup_id, first=first, count=count)
    return JsonResponse({"urls": urls})
