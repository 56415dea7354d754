"""Backups, restores, maintenance and GET /jobs/{id}. No event fires for any of them."""

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.authentication import calling_key
from accounts.permissions import NO_SCOPE_REQUIRED, require_scope
from accounts.scopes import Scope
from gshost.api.input import parse_input
from servers.api.base import ServerRouteViewSet
from servers.api.serializers import (
    BackupCreatedSerializer,
    BackupInput,
    BackupSerializer,
    JobSerializer,
    MaintenanceInput,
)
from servers.backups.jobs import backup_create, backup_restore, maintenance_start
from servers.game.capabilities import Capability, capability_require
from servers.models import JobKind
from servers.selectors import (
    backup_get_for_server,
    backup_list_for_server,
    job_get_for_key,
    job_get_for_server,
)

# What reading a job needs, by its kind: its scope and its capability.
JOB_READ = {
    JobKind.BACKUP: (Scope.BACKUPS_READ, Capability.BACKUPS),
    JobKind.RESTORE: (Scope.BACKUPS_READ, Capability.RESTORE),
    JobKind.WIPE: (Scope.SERVERS_READ, Capability.MAINTENANCE),
    JobKind.REINSTALL: (Scope.SERVERS_READ, Capability.MAINTENANCE),
}


class BackupViewSet(ServerRouteViewSet):
    scopes = {
        "list": Scope.BACKUPS_READ,
        "create": Scope.BACKUPS_CREATE,
        "restore": Scope.BACKUPS_RESTORE,
        "restore_job": Scope.BACKUPS_READ,
    }
    capability_of_action = {
        "list": Capability.BACKUPS,
        "create": Capability.BACKUPS,
        "restore": Capability.RESTORE,
        "restore_job": Capability.RESTORE,
    }

    @extend_schema(responses=BackupSerializer(many=True))
    def list(self, request: Request, server_id: str) -> Response:
        return self.paginated(backup_list_for_server(self.server()), BackupSerializer)

    @extend_schema(request=BackupInput, responses={202: BackupCreatedSerializer})
    def create(self, request: Request, server_id: str) -> Response:
        server = self.server()
        name = parse_input(request, BackupInput)["name"]
        backup, job = backup_create(server=server, actor=self.actor(), name=name)
        return Response(BackupCreatedSerializer({"backup": backup, "job": job}).data, status=202)

    @extend_schema(request=None, responses={202: JobSerializer})
    def restore(self, request: Request, server_id: str, backup_id: str) -> Response:
        server = self.server()
        backup = backup_get_for_server(server, backup_id)
        job = backup_restore(server=server, backup=backup, actor=self.actor())
        return Response(JobSerializer(job).data, status=202)

    @extend_schema(responses=JobSerializer)
    def restore_job(self, request: Request, server_id: str, job_id: str) -> Response:
        job = job_get_for_server(self.server(), job_id, JobKind.RESTORE)
        return Response(JobSerializer(job).data)


class MaintenanceViewSet(ServerRouteViewSet):
    scopes = {"create": Scope.MAINTENANCE_EXECUTE}
    capability_of_action = {"create": Capability.MAINTENANCE}

    @extend_schema(request=MaintenanceInput, responses={202: JobSerializer})
    def create(self, request: Request, server_id: str) -> Response:
        server = self.server()
        kind = JobKind(parse_input(request, MaintenanceInput)["action"])
        job = maintenance_start(server=server, kind=kind, actor=self.actor())
        return Response(JobSerializer(job).data, status=202)


class JobViewSet(ServerRouteViewSet):
    """The scope depends on the job's kind, so it is checked once the job is found."""

    scopes = {"retrieve": NO_SCOPE_REQUIRED}

    @extend_schema(responses=JobSerializer)
    def retrieve(self, request: Request, job_id: str) -> Response:
        key = calling_key(request)
        job = job_get_for_key(key, job_id)
        scope, capability = JOB_READ[JobKind(job.kind)]
        require_scope(key, scope)
        capability_require(job.server, capability)
        return Response(JobSerializer(job).data)
