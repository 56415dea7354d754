"""The simulated node's agent, in process: the one runtime (`servers.agents.runtime`) calls it
as it calls an agent over HTTPS, and it answers the agent's routes in the agent's shapes
(docs/agent-protocol.md): `202` for a request it takes, `400 invalid_request` for a body the
protocol refuses, `404 server_not_found` for a server not on the simulated node, `404
not_found` for what it does not serve (files, transfers). What it takes is carried out by its
host (`servers.simulated.host`) `SIMULATED_RUNTIME_DELAY_SECONDS` later, through the task
queue, and reported as an agent reports (`servers.agents.reports`). Its readings are invented
(`servers.simulated.numbers`), the same for the same server at the same moment. It holds no
connection, so no call to it waits or fails."""

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import unquote

from django.utils import timezone

from gshost_agent.protocol import (
    SERVER_ROUTE,
    ConsoleOutput,
    JobRequest,
    OutputLine,
    ProtocolError,
    StartRequest,
)
from servers.errors import InvalidState
from servers.models import (
    ConsoleCommand,
    Job,
    NodeKind,
    Server,
    ServerMigration,
    ServerState,
)
from servers.runtime import MetricsSample, Reading
from servers.selectors import server_max_players, server_reported_settings, server_state_history
from servers.simulated import host, numbers

CONSOLE_LINES_AT_ONCE = 100
# The agent's server routes (`SERVER_ROUTE`), an action and a part after it (a backup's id).
_SERVER_PATH = re.compile(
    SERVER_ROUTE.format(server_id="(?P<server_id>[^/]+)") + r"(?:/(?P<action>[a-z]+)(?:/[^/]+)?)?"
)

Answer = tuple[int, bytes]
Route = Callable[[Server, Any, dict[str, str]], Answer]


def _json(status: int, body: dict[str, Any]) -> Answer:
    return status, json.dumps(body).encode()


def _refused(status: int, code: str, message: str) -> Answer:
    return _json(status, {"error": {"code": code, "message": message}})


def simulated_reading(server: Server, now: datetime) -> Reading:
    """A server's invented readings at `now`: what an agent's heartbeat would carry."""
    running_since = server.state_changed_at if server.state == ServerState.RUNNING else None
    maximum = server_max_players(server)
    players = numbers.players_online(server.id, running_since, now, maximum)
    use = numbers.usage(server.id, server.state, now, len(players))
    return Reading(
        sampled_at=now,
        cpu_percent=use.cpu_percent,
        memory_mb=use.memory_mb,
        memory_limit_mb=numbers.MEMORY_LIMIT_MB,
        disk_mb=numbers.disk_mb(server.id, now),
        players_online=len(players),
        uptime_seconds=int((now - running_since).total_seconds()) if running_since else 0,
        players=tuple((player.name, player.joined_at) for player in players),
        max_players=maximum,
        network_in_kbps=use.network_in_kbps,
        network_out_kbps=use.network_out_kbps,
    )


class SimulatedAgent:
    """Hosts that always do what they are asked, `SIMULATED_RUNTIME_DELAY_SECONDS` later.

    Nothing of its own is stored: the due work is read from the rows (a server in a
    transitional state, a job not finished, a migration under way) and their timestamps."""

    def __init__(self) -> None:
        self._routes: dict[tuple[str, str], Route] = {
            ("POST", "start"): self._start,
            ("POST", "restart"): self._start,
            ("POST", "stop"): self._take,
            ("POST", "kill"): self._kill,
            ("POST", "jobs"): self._job,
            ("POST", "console"): self._command,
            ("GET", "console"): self._console,
            ("PUT", "settings"): self._taken_at_once,
            ("DELETE", ""): self._taken_at_once,  # it keeps nothing of a server but its rows
            ("DELETE", "backups"): self._taken_at_once,  # nor of a backup
        }

    def answer(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
    ) -> Answer:
        """What the agent's route `method path` answers: (status, JSON body)."""
        found = _SERVER_PATH.fullmatch(path)
        route = self._routes.get((method, found["action"] or "")) if found else None
        if found is None or route is None:
            return _refused(404, "not_found", "the simulated node does not serve this route")
        server_id = unquote(found["server_id"])
        server = Server.objects.filter(id=server_id, node__kind=NodeKind.SIMULATED).first()
        if server is None:
            return _refused(404, "server_not_found", "this node has never run that server")
        try:
            return route(server, body or {}, params or {})
        except ProtocolError as error:
            return _refused(400, "invalid_request", str(error))
        except InvalidState as error:
            return _refused(409, "invalid_state", error.message)

    def _start(self, server: Server, body: Any, params: dict[str, str]) -> Answer:
        StartRequest.from_json(body)
        return self._take(server, body, params)

    def _take(self, server: Server, body: Any, params: dict[str, str]) -> Answer:
        host.follow_up()
        return _json(202, {})

    def _taken_at_once(self, server: Server, body: Any, params: dict[str, str]) -> Answer:
        return _json(200, {})

    def _kill(self, server: Server, body: Any, params: dict[str, str]) -> Answer:
        """The game is killed: a crash, as `simulate crash` makes one (SIGKILL's exit code)."""
        host.host_crash(server_id=server.id, exit_code=137, cause="kill")
        return _json(202, {})

    def _job(self, server: Server, body: Any, params: dict[str, str]) -> Answer:
        request = JobRequest.from_json(body)
        found = Job.objects.filter(id=request.job_id, server=server)
        job = found.select_related("server__node").first()
        if job is None:
            return _refused(404, "not_found", "no such job of this server")
        host.host_stop_for_restore(job)
        return self._take(server, body, params)

    def _command(self, server: Server, body: Any, params: dict[str, str]) -> Answer:
        command = body.get("command")
        if not isinstance(command, str):
            raise ProtocolError("command", "command: a string")
        names = [name for name, _joined in simulated_reading(server, timezone.now()).players]
        accepted, output = numbers.command_output(server.game, command, names)
        return _json(200, {"accepted": accepted, "output": output})

    def _console(self, server: Server, body: Any, params: dict[str, str]) -> Answer:
        """The console history: each command, then its output, as numbered lines. A command
        row `r` gives lines 2r and 2r + 1, so the numbers only grow as commands are sent."""
        given = params.get("after", "0")
        if not given.isdecimal() or not given.isascii() or len(given) > 19:
            raise ProtocolError("after", "after: a line number")
        after = int(given)
        rows = ConsoleCommand.objects.filter(server=server, id__gte=after // 2).order_by("id")
        lines: list[OutputLine] = []
        for row in rows[:CONSOLE_LINES_AT_ONCE]:
            lines.append(OutputLine(2 * row.id, f"> {row.command}"))
            if row.output:
                lines.append(OutputLine(2 * row.id + 1, row.output))
        lines = [line for line in lines if line.n > after]
        last = max([after, *(line.n for line in lines)])
        return _json(200, ConsoleOutput(tuple(lines), last).to_json())

    def sweep(self, now: datetime) -> None:
        """Whatever it took and is due by `now`: finished, and reported."""
        host.finish_due_work(now)

    def migrate(self, migration: ServerMigration) -> None:
        """A move to a new address, finished by the host a delay later."""
        host.follow_up()

    def reading(self, server: Server, now: datetime) -> Reading:
        return simulated_reading(server, now)

    def reported_settings(self, server: Server) -> dict[str, str]:
        return server_reported_settings(server)

    def metrics(
        self, server: Server, start: datetime, end: datetime, step: timedelta
    ) -> list[MetricsSample]:
        history = server_state_history(server, start, end)
        maximum = server_max_players(server)
        samples, moment, index = [], start, 0
        while moment <= end:
            while index + 1 < len(history) and history[index + 1][0] <= moment:
                index += 1
            state = history[index][1]
            players = (
                numbers.player_count_at(server.id, moment, maximum)
                if state == ServerState.RUNNING
                else 0
            )
            use = numbers.usage(server.id, state, moment, players)
            samples.append(
                MetricsSample(
                    moment,
                    use.cpu_percent,
                    use.memory_mb,
                    use.network_in_kbps,
                    use.network_out_kbps,
                    players,
                )
            )
            moment += step
        return samples


SIMULATED_AGENT = SimulatedAgent()
