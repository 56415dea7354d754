"""The simulated hosts behind the runtime boundary (`servers.runtime.Runtime`): requests are
finished by `servers.simulated.host` after `SIMULATED_RUNTIME_DELAY_SECONDS`, readings are
invented by `servers.simulated.numbers`. The default `SERVER_RUNTIME`."""

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone
from django_q.tasks import async_task

from gshost import handoff
from servers.game.settings import settings_report_applied
from servers.models import ConsoleCommand, Job, Server, ServerMigration, ServerState
from servers.runtime import (
    CommandResult,
    ConsoleLine,
    ConsoleLines,
    MetricsSample,
    Player,
    PlayerList,
    StatsSample,
)
from servers.selectors import server_max_players, server_reported_settings, server_state_history
from servers.simulated import host, numbers

CONSOLE_LINES_AT_ONCE = 100


def simulated_delay() -> timedelta:
    return timedelta(seconds=settings.SIMULATED_RUNTIME_DELAY_SECONDS)


class SimulatedRuntime:
    """Hosts that always do what they are asked, `SIMULATED_RUNTIME_DELAY_SECONDS` later.

    Nothing of its own is stored: the due work is read from the rows (a server in a
    transitional state, a job not finished, a migration under way) and their timestamps.
    A follow-up task sweeps until the delay has passed; `servers.recovery` (run every few
    seconds by the worker's timer) finishes anything a lost or unqueued task left behind.
    """

    def _follow_up(self) -> None:
        until = (timezone.now() + simulated_delay()).isoformat()
        handoff.after_commit(async_task, "servers.tasks.runtime_follow", until)

    def start(self, server: Server) -> None:
        self._follow_up()

    def stop(self, server: Server) -> None:
        self._follow_up()

    def restart(self, server: Server) -> None:
        self._follow_up()

    def run_job(self, job: Job) -> None:
        host.host_stop_for_restore(job)
        self._follow_up()

    def migrate(self, migration: ServerMigration) -> None:
        self._follow_up()

    def push_settings(self, server: Server) -> None:
        """A game reads its settings when it starts: a stopped server takes them at once."""
        if server.state == ServerState.STOPPED:
            settings_report_applied(server=server)

    def kill(self, server: Server) -> None:
        """The game is killed: a crash, as `simulate crash` makes one (SIGKILL's exit code)."""
        host.host_crash(server_id=server.id, exit_code=137, cause="kill")

    def remove(self, server: Server) -> None:
        """A simulated host keeps nothing of a server but its rows."""

    def remove_backup(self, server: Server, backup_id: str) -> None:
        """Nor of a backup."""

    def console_lines(self, server: Server, after: int) -> ConsoleLines:
        """The console history: each command, then its output, as numbered lines. A command
        row `r` gives lines 2r and 2r + 1, so the numbers only grow as commands are sent."""
        first_row = max(after, 0) // 2
        rows = ConsoleCommand.objects.filter(server=server, id__gte=first_row).order_by("id")
        lines: list[ConsoleLine] = []
        for row in rows[:CONSOLE_LINES_AT_ONCE]:
            lines.append(ConsoleLine(2 * row.id, f"> {row.command}"))
            if row.output:
                lines.append(ConsoleLine(2 * row.id + 1, row.output))
        lines = [line for line in lines if line.n > after]
        return ConsoleLines(lines, max([after, *(line.n for line in lines)]))

    def send_command(self, server: Server, command: str) -> CommandResult:
        names = [p.name for p in self.players(server, timezone.now()).players]
        accepted, output = numbers.command_output(server.game, command, names)
        return CommandResult(accepted, output)

    def players(self, server: Server, now: datetime) -> PlayerList:
        running_since = server.state_changed_at if server.state == ServerState.RUNNING else None
        maximum = server_max_players(server)
        online = numbers.players_online(server.id, running_since, now, maximum)
        players = [Player(p.name, p.joined_at) for p in online]
        return PlayerList(len(players), maximum, players)

    def stats(self, server: Server, now: datetime) -> StatsSample:
        players = self.players(server, now).count
        use = numbers.usage(server.id, server.state, now, players)
        running = server.state == ServerState.RUNNING
        return StatsSample(
            state=server.state,
            sampled_at=now,
            cpu_percent=use.cpu_percent,
            memory_mb=use.memory_mb,
            memory_limit_mb=numbers.MEMORY_LIMIT_MB,
            disk_mb=numbers.disk_mb(server.id, now),
            network_in_kbps=use.network_in_kbps,
            network_out_kbps=use.network_out_kbps,
            players_online=players,
            uptime_seconds=int((now - server.state_changed_at).total_seconds()) if running else 0,
        )

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
            samples.append(MetricsSample(moment, *_usage_fields(use), players))
            moment += step
        return samples

    def actual_settings(self, server: Server) -> dict[str, str]:
        return server_reported_settings(server)

    def sweep(self, now: datetime) -> None:
        host.finish_due_work(now, simulated_delay())


def _usage_fields(use: numbers.Usage) -> tuple[float, int, float, float]:
    return use.cpu_percent, use.memory_mb, use.network_in_kbps, use.network_out_kbps
