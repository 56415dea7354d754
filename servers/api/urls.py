"""Routes under /api/public/v1/ for servers and jobs; names are the audit `action`."""

from django.urls import path

from servers.api.control import ServerControlViewSet
from servers.api.jobs import BackupViewSet, JobViewSet, MaintenanceViewSet
from servers.api.readings import RealtimeStatsViewSet, ServerReadingsViewSet
from servers.api.schedules import ScheduleViewSet
from servers.api.settings import ConfigEventsStatusViewSet, SettingsViewSet

SERVER = "servers/<str:server_id>"

urlpatterns = [
    path(f"{SERVER}/power", ServerControlViewSet.as_view({"post": "power"}), name="servers.power"),
    path(
        f"{SERVER}/console",
        ServerControlViewSet.as_view({"post": "console"}),
        name="servers.console",
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
