"""The runtime of every node: requests are calls to the node's agent (docs/agent-protocol.md),
made after the requesting service committed (never inside a transaction), players and stats
are what the node's last heartbeat said (`servers.agents.last_readings`), metrics the minutes its
heartbeats carried (`servers.agents.minutes`). What the processes then do comes back as reports
(`servers.agents.reports`).

An agent is called over HTTPS only, verified against the node's CA (or the system's), with the
node token as bearer, no proxies from the environment. A node without a heartbeat for 30 s, or
whose agent does not answer, is `NodeUnavailable` (503 node_unavailable): nothing is queued.
How long a call may take, and when a node is not even tried, is `servers.agents.calls`.

The simulated node's agent is in process (`servers.runtime.in_process_agent`): the same calls
reach it without a connection, and it is asked for its readings, which it invents, where an
agent's come from its heartbeats.
"""

import json
import logging
import ssl
import time
from dataclasses import replace
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import ProtocolError as BrokenConnection
from urllib3.util import Timeout

from gshost import process_state
from gshost.errors import InvalidInput, Misuse
from gshost.handoff import require_outside_transaction
from gshost_agent.protocol import (
    OBJECT_STORAGE,
    ConsoleOutput,
    JobKind,
    JobRequest,
    ProtocolError,
    StartRequest,
    server_route,
)
from servers.agents.calls import (
    CONNECT_TIMEOUT_SECONDS,
    DEADLINE_SECONDS,
    node_call_begin,
    node_call_end,
    node_mark_failing,
)
from servers.agents.console_mirror import console_lines_mirrored
from servers.agents.last_readings import reading_of, reported_settings_of
from servers.agents.minutes import server_metrics
from servers.backups.jobs import jobs_fail_unreported
from servers.backups.storage import (
    backup_download_url,
    backup_key,
    backup_upload_begin,
    backup_upload_discard,
    in_bucket,
)
from servers.errors import (
    AgentError,
    DiskLimitExceeded,
    InvalidAddress,
    InvalidState,
    NodeAnswerLate,
    NodeRefused,
    NodeUnavailable,
)
from servers.fleet.moves import parse_address
from servers.fleet.nodes import node_token
from servers.game.settings import desired_settings, settings_report_applied
from servers.models import Job, Node, NodeState, Server, ServerState
from servers.runtime import (
    CommandResult,
    ConsoleLine,
    ConsoleLines,
    MetricsSample,
    Player,
    PlayerList,
    Reading,
    StatsSample,
    in_process_agent,
)
from servers.selectors import server_max_players

logger = logging.getLogger(__name__)

MAX_ANSWER_BYTES = 4 * 1024 * 1024
SESSIONS_KEPT = 32  # one per node CA; a process talks to a handful of nodes
# Answers that say why the agent refused; 422, 502 and 507 come from transfers (a checksum
# that differs, a target that did not take the archive, a full disk).
REFUSALS = frozenset({400, 404, 409, 422, 502, 507})
PORT_IN_USE = "port_in_use"  # the agent's code: the node itself or another server holds the port
DISK_LIMIT_EXCEEDED = "disk_limit_exceeded"  # the agent's code and ours: the files are too big


class _CaAdapter(HTTPAdapter):
    """Verifies the agent's certificate against one CA (PEM text), not the system's."""

    def __init__(self, ca_pem: str) -> None:
        self._context = ssl.create_default_context(cadata=ca_pem)
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["ssl_context"] = self._context
        super().init_poolmanager(*args, **kwargs)


@lru_cache(maxsize=SESSIONS_KEPT)
def _session(ca_pem: str) -> requests.Session:
    """A session per CA (its connections are reused); bounded, and reset by `reset_sessions`."""
    session = requests.Session()
    session.trust_env = False  # no proxy or CA bundle from the environment
    if ca_pem:
        session.mount("https://", _CaAdapter(ca_pem))
    return session


def reset_sessions() -> None:
    _session.cache_clear()


process_state.register(
    "servers.agents.runtime",
    bound=f"at most {SESSIONS_KEPT} HTTPS sessions, one per node CA, least recently used dropped",
    reset=reset_sessions,
)


def agent_call(
    node: Node,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    params: dict[str, str] | None = None,
    read_timeout: float | None = None,
) -> dict[str, Any]:
    """One call to the node's agent: its JSON answer, AgentError for an error it answered,
    NodeUnavailable when the node is unreachable or failing, or the agent cannot be reached
    within the deadline (`read_timeout`: a long call's own, such as a transfer's upload)."""
    status, raw = agent_call_raw(
        node, method, path, body=body, params=params, read_timeout=read_timeout
    )
    return _answer(node, method, path, status, raw)


def agent_call_raw(
    node: Node,
    method: str,
    path: str,
    *,
    body: dict[str, Any] | None = None,
    data: bytes | None = None,
    params: dict[str, str] | None = None,
    read_timeout: float | None = None,
    takes_slot: bool | None = None,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> tuple[int, bytes]:
    """One call to the node's agent as `agent_call` makes it (deadline, fail fast, slots),
    answering the status and the raw body, whatever the status: the caller reads it. `data`
    is sent as the body instead of JSON; a call with `takes_slot=False` takes no slot (work
    that may take seconds on the agent: others about the node need not wait behind it)."""
    require_outside_transaction(f"The agent call {method} {path}")
    in_process = in_process_agent(node)
    if in_process is not None:
        return in_process.answer(method, path, body=body, params=params)
    _require_online(node)
    token = node_token(node)
    if token is None:
        logger.error("Node %s: its token cannot be decrypted (WEBHOOK_SECRET_KEYS?)", node.name)
        raise NodeUnavailable(node.name, "its token cannot be used")
    deadline = DEADLINE_SECONDS if read_timeout is None else CONNECT_TIMEOUT_SECONDS + read_timeout
    slot_taken = read_timeout is None if takes_slot is None else takes_slot
    slot = node_call_begin(node, deadline=deadline, takes_slot=slot_taken)
    try:
        return _request(node, method, path, body, params, token, deadline, data, max_bytes)
    except (requests.RequestException, ssl.SSLError, TimeoutError) as error:
        logger.warning("Node %s: %s %s failed: %s", node.name, method, path, type(error).__name__)
        node_mark_failing(node)
        if _may_have_reached(error):
            raise NodeAnswerLate(node.name) from None
        raise NodeUnavailable(node.name, "its agent cannot be reached") from None
    finally:
        node_call_end(slot)


def _may_have_reached(error: Exception) -> bool:
    """Whether the request was sent before the call failed: it timed out or broke while
    waiting for the answer, not while connecting."""
    if isinstance(error, requests.ConnectTimeout | requests.exceptions.SSLError | ssl.SSLError):
        return False
    if isinstance(error, requests.ReadTimeout | requests.exceptions.ChunkedEncodingError):
        return True
    if isinstance(error, requests.ConnectionError):
        return isinstance(error.args[0] if error.args else None, BrokenConnection)
    return isinstance(error, TimeoutError)


def _request(
    node: Node,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    params: dict[str, str] | None,
    token: str,
    deadline: float,
    data: bytes | None = None,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> tuple[int, bytes]:
    """Status and body, all of it within `deadline` seconds (TimeoutError otherwise)."""
    ends_at = time.monotonic() + deadline
    timeout = Timeout(connect=CONNECT_TIMEOUT_SECONDS, read=deadline, total=deadline)
    with _session(node.ca_pem).request(
        method,
        node.url.rstrip("/") + path,
        json=body,
        data=data,
        params=params,
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        timeout=timeout,  # type: ignore[arg-type]  # requests hands a urllib3 Timeout on
        allow_redirects=False,
        stream=True,
    ) as response:
        chunks, size = [], 0
        for chunk in response.iter_content(64 * 1024):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes or time.monotonic() > ends_at:
                raise TimeoutError("the answer took too long or was too large")
        return response.status_code, b"".join(chunks)


def _answer(node: Node, method: str, path: str, status: int, raw: bytes) -> dict[str, Any]:
    try:
        answer = json.loads(raw) if raw else None
    except ValueError:
        answer = None
    if status < 300:
        return answer if isinstance(answer, dict) else {}  # an empty 202 is an acceptance
    found = answer.get("error") if isinstance(answer, dict) else None
    error: dict[str, Any] = found if isinstance(found, dict) else {}
    code, message = str(error.get("code", "")), str(error.get("message", ""))[:300]
    if status in REFUSALS:
        raise AgentError(status, code, message)
    logger.warning("Node %s: %s %s answered %s %s", node.name, method, path, status,
                   code)  # fmt: skip
    raise NodeUnavailable(node.name, f"its agent answered {status}")


def _refused(server: Server, error: AgentError) -> NodeRefused:
    """409 invalid_state to the customer (CONTRACT's code), in words of the customer's own."""
    if error.agent_code == PORT_IN_USE:
        return NodeRefused(
            server.state,
            f"Port {server.port} is in use on node {server.node.name} (by something other than "
            "this server's game): the server cannot start there.",
        )
    if error.agent_code == DISK_LIMIT_EXCEEDED:
        return DiskLimitExceeded(
            server.state,
            f"The server's files are over its disk limit ({server.disk_mb} MB): delete some, "
            "or raise its plan's disk_mb, then start it.",
        )
    return NodeRefused(server.state, f"The node refused: {error.message or error.agent_code}")


def _start_body(server: Server) -> dict[str, Any]:
    """The game, its port and settings, and its plan: the limits its sandbox enforces."""
    return StartRequest(
        game=server.game,
        port=_port(server),
        memory_mb=server.memory_mb,
        disk_mb=server.disk_mb,
        cpu_percent=server.cpu_percent,
        processes=server.processes,
        settings=desired_settings(server),
    ).to_json()


def _port(server: Server) -> int:
    """Its port of the node's range (placement gives one to every server on a node that
    forwards ports), else the port of its address (the simulated node's servers)."""
    if server.port is not None:
        return server.port
    try:
        return parse_address(server.address)[1]
    except InvalidAddress:
        raise Misuse(f"Server {server.id} on node {server.node.name} has no port.") from None


def _job_body(job: Job) -> dict[str, Any]:
    server = job.server
    request = JobRequest(job_id=job.id, kind=JobKind(job.kind), game=server.game)
    if job.backup is not None:
        request = replace(request, backup_id=job.backup.id)
    if job.kind == JobKind.BACKUP and in_bucket(job.backup):
        request = replace(request, storage=OBJECT_STORAGE)  # the node asks for parts' URLs
    if job.kind == JobKind.RESTORE:
        if not job.backup or not job.backup.sha256:
            raise InvalidState(server.state, "The backup has no archive on this node.")
        # Content beyond the plan's disk is refused.
        request = replace(request, sha256=job.backup.sha256, disk_mb=server.disk_mb)
        if in_bucket(job.backup):
            url, size = backup_download_url(job.backup), job.backup.size_bytes or 0
            request = replace(request, download_url=url, size_bytes=size)
    if job.kind == JobKind.REINSTALL:
        request = replace(request, settings=desired_settings(server))
        if server.reinstall_requested_at is not None:  # asked by the Application API
            request = replace(request, empty=True)  # an empty directory (servers.desired)
    return request.to_json()


class NodeRuntime:
    """Servers on every node. A migration between agent nodes moves the server to another
    node, with its data (`servers.agents.transfers`), not to an address."""

    def _post(self, server: Server, action: str, body: dict[str, Any] | None = None) -> None:
        try:
            agent_call(server.node, "POST", server_route(server.id, action), body or {})
        except AgentError as error:
            raise _refused(server, error) from None

    def start(self, server: Server) -> None:
        self._post(server, "start", _start_body(server))

    def stop(self, server: Server) -> None:
        self._post(server, "stop")

    def restart(self, server: Server) -> None:
        self._post(server, "restart", _start_body(server))

    def kill(self, server: Server) -> None:
        self._post(server, "kill")

    def remove(self, server: Server) -> None:
        """The agent removes the server's directory, its run state and its backups on the
        node; it refuses (409) while the game runs or is being sent elsewhere."""
        path = server_route(server.id)
        try:
            agent_call(server.node, "DELETE", path, params={"backups": "remove"})
        except AgentError as error:
            raise _refused(server, error) from None

    def remove_backup(self, server: Server, backup_id: str) -> None:
        """The agent removes the archive; it refuses (409) while a job works on the server's
        data."""
        try:
            agent_call(server.node, "DELETE", server_route(server.id, f"backups/{backup_id}"))
        except AgentError as error:
            raise _refused(server, error) from None

    def send_command(self, server: Server, command: str) -> CommandResult:
        """The command to the game's stdin (the service made a stop command a stop first).
        An agent takes every command it is sent; the simulated node's games answer whether
        they know it, and with what."""
        try:
            path = server_route(server.id, "console")
            answer = agent_call(server.node, "POST", path, {"command": command})
        except AgentError as error:
            if error.status == 400:  # the rules are ours too: a disagreement, told as ours
                message = error.message or "The node refused the command."
                raise InvalidInput(message, fields={"command": [message]}) from None
            raise _refused(server, error) from None
        accepted, output = answer.get("accepted", True), answer.get("output", "")
        return CommandResult(accepted is not False, output if isinstance(output, str) else "")

    def run_job(self, job: Job) -> None:
        """The agent starts it, or refuses (another job runs, the game runs); its progress
        and its end come back as reports. A backup to the bucket has its upload begun first,
        and aborted when the agent does not take the job."""
        uploading = job.backup if job.kind == JobKind.BACKUP and in_bucket(job.backup) else None
        if uploading is not None:
            backup_upload_begin(uploading, job.server)
        try:
            self._post(job.server, "jobs", _job_body(job))
        except BaseException:
            if uploading is not None:
                backup_upload_discard(backup_key(uploading))
            raise

    def push_settings(self, server: Server) -> None:
        """The agent writes the settings file now: a stopped server is in sync at once, a
        running one reads it at its next start (whose body carries them too). The desired
        settings are the truth: a node that cannot take them now changes nothing here (the
        drift shows it until the next start)."""
        body = {"game": server.game, "settings": desired_settings(server)}
        try:
            agent_call(server.node, "PUT", server_route(server.id, "settings"), body)
        except (AgentError, NodeUnavailable) as error:
            logger.warning("Node %s: settings of %s not written now: %s", server.node.name,
                           server.id, error)  # fmt: skip
            return
        if server.state == ServerState.STOPPED:
            settings_report_applied(server=server)

    def _get(self, server: Server, what: str, params: dict[str, str] | None = None) -> Any:
        """A reading; None when the agent has none: it does not know the server (never
        started there, 404) or the game does not run (409)."""
        try:
            return agent_call(server.node, "GET", server_route(server.id, what), params=params)
        except AgentError as error:
            if error.status in (404, 409):
                return None
            raise NodeUnavailable(server.node.name, "its agent refused the reading") from None

    def players(self, server: Server, now: datetime) -> PlayerList:
        """The players its node last reported in a heartbeat (never a call to the node)."""
        reading = _reading(server, now)
        if reading is None:
            return PlayerList(0, server_max_players(server), [])
        players = [Player(name, joined_at) for name, joined_at in reading.players]
        maximum = reading.max_players or server_max_players(server)
        return PlayerList(reading.players_online, maximum, players)

    def stats(self, server: Server, now: datetime) -> StatsSample:
        """The stats its node last reported in a heartbeat, with their time (never a call)."""
        reading = _reading(server, now)
        if reading is None:
            return _idle_stats(server, now)
        return StatsSample(
            state=server.state,
            sampled_at=reading.sampled_at,
            cpu_percent=reading.cpu_percent,
            memory_mb=reading.memory_mb,
            memory_limit_mb=reading.memory_limit_mb or server.memory_mb,
            disk_mb=reading.disk_mb,
            network_in_kbps=reading.network_in_kbps,
            network_out_kbps=reading.network_out_kbps,
            players_online=reading.players_online,
            uptime_seconds=reading.uptime_seconds,
        )

    def metrics(
        self, server: Server, start: datetime, end: datetime, step: timedelta
    ) -> list[MetricsSample]:
        """From the minutes its node sent in its heartbeats (never a call to the node): also
        while the node is unreachable, the history it sent stays."""
        in_process = in_process_agent(server.node)
        if in_process is not None:
            return in_process.metrics(server, start, end, step)
        latest = (
            None if server.state == ServerState.STOPPED else reading_of(server.node_id, server.id)
        )
        return server_metrics(server_id=server.id, start=start, end=end, step=step, latest=latest)

    def actual_settings(self, server: Server) -> dict[str, str]:
        """The settings file as the node's last heartbeat reported it (never a call)."""
        in_process = in_process_agent(server.node)
        if in_process is not None:
            return in_process.reported_settings(server)
        _require_online(server.node)
        return reported_settings_of(server.node.id, server.id) or {}

    def console_lines(self, server: Server, after: int) -> ConsoleLines:
        """The game's output as last fetched from its node, with that time (never a call: a
        fetch starts in the background when it is a second old, servers.agents.console_mirror).
        The simulated node's, in process, are asked for each time."""
        if in_process_agent(server.node) is not None:
            return self._console(server, after) or ConsoleLines([], after)
        _require_online(server.node)
        return console_lines_mirrored(server.id, after, lambda since: self._console(server, since))

    def _console(self, server: Server, after: int) -> ConsoleLines | None:
        answer = self._get(server, "console", {"after": str(after)})
        if answer is None:
            return None
        try:
            output = ConsoleOutput.from_json(answer)
        except ProtocolError:
            raise _garbled(server) from None
        return ConsoleLines([ConsoleLine(line.n, line.text) for line in output.lines], output.last)

    def sweep(self, now: datetime) -> None:
        """Agents report what their processes do; only jobs of silent nodes time out."""
        jobs_fail_unreported(now)


def _reading(server: Server, now: datetime) -> Reading | None:
    """The server's last reported readings; none for a stopped server. NodeUnavailable at
    once when its node is unreachable (its heartbeats, and so its readings, stopped). The
    simulated node's are invented for `now`, a stopped server's too."""
    in_process = in_process_agent(server.node)
    if in_process is not None:
        return in_process.reading(server, now)
    _require_online(server.node)
    return None if server.state == ServerState.STOPPED else reading_of(server.node.id, server.id)


def _require_online(node: Node) -> None:
    """What a node last told is shown while it is online; NodeUnavailable at once otherwise."""
    if node.state() != NodeState.ONLINE:
        raise NodeUnavailable(node.name, "no heartbeat for 30 s")


def _idle_stats(server: Server, now: datetime) -> StatsSample:
    return StatsSample(
        state=server.state,
        sampled_at=now,
        cpu_percent=0.0,
        memory_mb=0,
        memory_limit_mb=server.memory_mb,
        disk_mb=0,
        network_in_kbps=None,
        network_out_kbps=None,
        players_online=0,
        uptime_seconds=0,
    )


def _garbled(server: Server) -> NodeUnavailable:
    logger.warning("Node %s answered a reading of %s in an unexpected shape", server.node.name,
                   server.id)  # fmt: skip
    return NodeUnavailable(server.node.name, "its agent answered something unexpected")
