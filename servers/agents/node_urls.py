"""Routes the agents call, mounted at /api/node/v1/ (docs/agent-protocol.md)."""

from django.urls import path

from servers.agents import sftp_views

app_name = "node_api"

urlpatterns = [path("sftp-auth", sftp_views.sftp_auth, name="sftp_auth")]
