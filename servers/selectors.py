"""Reads of servers, always through the caller's organization and the key's restrictions."""

from collections.abc import Iterable
from datetime import datetime
from typing import TypeVar

from django.db.models import QuerySet

from accounts.key_records import KeyRecord
from servers.errors import JobNotFound, NotFoundOnServer, ServerNotFound
from servers.game.settings import effective, max_players_key
from servers.models import (
    Backup,
    BackupState,
    ConfigEvent,
    Job,
    JobKind,
    JobState,
    Schedule,
    Server,
    ServerState,
    ServerTransition,
    SettingChange,
)

OnServer = TypeVar("OnServer", Backup, Schedule, ConfigEvent)


def servers_live() -> QuerySet[Server]:
    """Every server whose deletion was not asked: a server being deleted is not found by
    anyone but staff from that moment (its removal happens when its node answers)."""
    return Server.objects.filter(delete_requested_at__isnull=True)


def server_ids_in_organization(organization_id: str, server_ids: Iterable[str]) -> set[str]:
    wanted = list(server_ids)
    if not wanted:
        return set()
    found = servers_live().filter(organization_id=organization_id, id__in=wanted)
    return set(found.values_list("id", flat=True))


def server_list_for_organization(organization_id: str) -> QuerySet[Server]:
    return servers_live().filter(organization_id=organization_id)


def server_list_for_key(key: KeyRecord) -> QuerySet[Server]:
    servers = server_list_for_organization(key.organization_id).select_related("node")
    if key.server_restrictions:
        servers = servers.filter(id__in=sorted(key.server_restrictions))
    return servers


def server_get_for_key(key: KeyRecord, server_id: str) -> Server:
    """The server, or ServerNotFound: the same answer for foreign, restricted or absent."""
    if not key.allows_server(server_id):
        raise ServerNotFound()
    servers = servers_live().select_related("node")
    server = servers.filter(organization_id=key.organization_id, id=server_id).first()
    if server is None:
        raise ServerNotFound()
    return server


def server_reported_settings(server: Server) -> dict[str, str]:
    """What the host last reported running with (defaults where it reported nothing)."""
    return effective(server.game, server.reported_settings)


def server_max_players(server: Server) -> int:
    value = server_reported_settings(server).get(max_players_key(server.game), "0")
    return int(value) if value.isdigit() else 0


def server_state_history(
    server: Server, start: datetime, end: datetime
) -> list[tuple[datetime, str]]:
    """(since, state) pairs covering [start, end], oldest first; the first starts at `start`."""
    before = (
        ServerTransition.objects.filter(server=server, at__lte=start).order_by("-at", "-id").first()
    )
    history = [(start, before.to_state if before else ServerState.STOPPED.value)]
    during = ServerTransition.objects.filter(server=server, at__gt=start, at__lte=end)
    history += [(row.at, row.to_state) for row in during.order_by("at", "id")]
    return history


DATA_JOB_KINDS = (JobKind.RESTORE, JobKind.WIPE, JobKind.REINSTALL)


def server_busy_job(server: Server) -> Job | None:
    """An unfinished restore, wipe or reinstall: the server must stay stopped meanwhile."""
    unfinished = Job.objects.filter(
        server=server, kind__in=DATA_JOB_KINDS, state__in=(JobState.QUEUED, JobState.RUNNING)
    )
    return unfinished.order_by("created_at").first()


def job_get_for_key(key: KeyRecord, job_id: str) -> Job:
    """A job of a server the key may see, or JobNotFound (never ServerNotFound: the id
    in the path is a job's)."""
    job = (
        Job.objects.select_related("server")
        .filter(
            id=job_id,
            server__organization_id=key.organization_id,
            server__delete_requested_at__isnull=True,
        )
        .first()
    )
    if job is None or not key.allows_server(job.server_id):
        raise JobNotFound()
    return job


def job_get_for_server(server: Server, job_id: str, kind: JobKind) -> Job:
    job = Job.objects.filter(id=job_id, server=server, kind=kind).first()
    if job is None:
        raise NotFoundOnServer(f"{kind.label.lower()} job")
    return job


def _one_on_server(model: type[OnServer], server: Server, object_id: str, what: str) -> OnServer:
    """The `model` row with this id on this server, else NotFoundOnServer (another server's
    is not found either). Its `server` is set already, so reading it costs no query."""
    found = model.objects.filter(id=object_id, server=server).first()
    if found is None:
        raise NotFoundOnServer(what)
    found.server = server
    return found


def backup_get_for_server(server: Server, backup_id: str) -> Backup:
    """A backup of the server; one staff deleted (its object on its way out) is not found."""
    backup = _one_on_server(Backup, server, backup_id, "backup")
    if backup.state == BackupState.DELETING:
        raise NotFoundOnServer("backup")
    return backup


def backup_list_for_server(server: Server) -> QuerySet[Backup]:
    return Backup.objects.filter(server=server).exclude(state=BackupState.DELETING)


def schedule_list_for_server(server: Server) -> QuerySet[Schedule]:
    return Schedule.objects.filter(server=server)


def schedule_get_for_server(server: Server, schedule_id: str) -> Schedule:
    return _one_on_server(Schedule, server, schedule_id, "schedule")


def setting_changes_for_server(server: Server) -> QuerySet[SettingChange]:
    return SettingChange.objects.filter(server=server)


def config_event_get_for_server(server: Server, event_id: str) -> ConfigEvent:
    return _one_on_server(ConfigEvent, server, event_id, "config event")


def server_last_start_at(server: Server) -> datetime | None:
    """When the server's game was last asked to start (a start or a restart), if ever."""
    return (
        ServerTransition.objects.filter(
            server=server, to_state__in=[ServerState.STARTING, ServerState.RESTARTING]
        )
        .order_by("-at")
        .values_list("at", flat=True)
        .first()
    )
