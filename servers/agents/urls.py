"""Routes the agents call, mounted at /internal/nodes/ (docs/agent-protocol.md)."""

from django.urls import path

from servers.agents import views

app_name = "nodes_internal"

urlpatterns = [
    path("heartbeat", views.heartbeat, name="heartbeat"),
    path("reports", views.reports, name="reports"),
    path("console-commands", views.console_commands, name="console_commands"),
    path("backup-parts", views.backup_parts, name="backup_parts"),
]
