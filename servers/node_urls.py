"""Routes the agents call, mounted at /internal/nodes/ (docs/agent-protocol.md)."""

from django.urls import path

from servers import node_api

app_name = "nodes_internal"

urlpatterns = [
    path("heartbeat", node_api.heartbeat, name="heartbeat"),
    path("reports", node_api.reports, name="reports"),
    path("backup-parts", node_api.backup_parts, name="backup_parts"),
]
