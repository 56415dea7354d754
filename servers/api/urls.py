"""Routes under /api/public/v1/ for servers and jobs; names are the audit `action`."""

from django.urls import path

from servers.api.console_sessions import ConsoleSessionViewSet
from servers.api.control import ServerControlViewSet
from servers.api.files import FilesViewSet
from servers.api.jobs import BackupViewSet, JobViewSet, MaintenanceViewSet
from servers.api.readings import RealtimeStatsViewSet, ServerReadingsViewSet
from servers.api.schedules import ScheduleViewSet
from servers.api.settings import ConfigEventsStatusViewSet, SettingsViewSet

SERVER = "servers/<str:server_id>"

FILES = f"{SERVER}/files"

urlpatterns = [
    path(FILES, FilesViewSet.as_view({"get": "listing"}), name="files.list"),
    path(
        f"{FILES}/content",
        FilesViewSet.as_view({"get": "read", "put": "write"}),
        name="files.read",  # a PUT is audited as files.write
    ),
    path(f"{FILES}/rename", FilesViewSet.as_view({"post": "rename"}), name="files.rename"),
    path(f"{FILES}/copy", FilesViewSet.as_view({"post": "copy"}), name="files.copy"),
    path(
        f"{FILES}/directory",
        FilesViewSet.as_view({"post": "directory"}),
        name="files.directory",
    ),
    path(f"{FILES}/delete", FilesViewSet.as_view({"post": "delete_paths"}), name="files.delete"),
    path(f"{FILES}/compress", FilesViewSet.as_view({"post": "compress"}), name="files.compress"),
    path(
        f"{FILES}/decompress",
        FilesViewSet.as_view({"post": "decompress"}),
        name="files.decompress",
    ),
    path(f"{FILES}/pull", FilesViewSet.as_view({"post": "pull"}), name="files.pull"),
    path(
        f"{FILES}/download-link",
        FilesViewSet.as_view({"post": "download_link"}),
        name="files.download",
    ),
    path(
        f"{FILES}/upload-link",
        FilesViewSet.as_view({"post": "upload_link"}),
        name="files.upload",
    ),
    path(f"{SERVER}/power", ServerControlViewSet.as_view({"post": "power"}), name="servers.power"),
    path(
        f"{SERVER}/console",
        ServerControlViewSet.as_view({"post": "console"}),
        name="servers.console",
    ),
    path(
        f"{SERVER}/console/sessions",
        ConsoleSessionViewSet.as_view({"post": "create"}),
        name="servers.console.sessions",
    ),
    path(
        f"{SERVER}/capabilities",
        ServerControlViewSet.as_view({"get": "capabilities"}),
        name="servers.game.capabilities",
    ),
    path(
        f"{SERVER}/players",
        ServerReadingsViewSet.as_view({"get": "players"}),
        name="servers.players",
    ),
    path(
        f"{SERVER}/realtime-stats",
        RealtimeStatsViewSet.as_view({"get": "stats"}),
        name="servers.realtime_stats",
    ),
    path(
        f"{SERVER}/metrics",
        ServerReadingsViewSet.as_view({"get": "metrics"}),
        name="servers.metrics",
    ),
    path(
        f"{SERVER}/migration-status",
        ServerReadingsViewSet.as_view({"get": "migration_status"}),
        name="servers.migration_status",
    ),
    path(
        f"{SERVER}/settings/history",
        SettingsViewSet.as_view({"get": "history"}),
        name="servers.settings.history",
    ),
    path(
        f"{SERVER}/settings/drift",
        SettingsViewSet.as_view({"get": "drift"}),
        name="servers.settings.drift",
    ),
    path(
        f"{SERVER}/config-events/status",
        ConfigEventsStatusViewSet.as_view({"get": "status"}),
        name="servers.game.config_events.status",
    ),
    path(
        f"{SERVER}/schedules",
        ScheduleViewSet.as_view({"get": "list"}),
        name="servers.schedules",
    ),
    path(
        f"{SERVER}/schedules/<str:schedule_id>/run",
        ScheduleViewSet.as_view({"post": "run"}),
        name="servers.schedules.run",
    ),
    path(
        f"{SERVER}/backups",
        BackupViewSet.as_view({"get": "list", "post": "create"}),
        name="servers.backups",
    ),
    path(
        f"{SERVER}/backups/restore-jobs/<str:job_id>",
        BackupViewSet.as_view({"get": "restore_job"}),
        name="servers.backups.restore_job",
    ),
    path(
        f"{SERVER}/backups/<str:backup_id>/restore",
        BackupViewSet.as_view({"post": "restore"}),
        name="servers.backups.restore",
    ),
    path(
        f"{SERVER}/maintenance",
        MaintenanceViewSet.as_view({"post": "create"}),
        name="servers.maintenance",
    ),
    path("jobs/<str:job_id>", JobViewSet.as_view({"get": "retrieve"}), name="jobs.retrieve"),
]
