"""The server routes of the Customer API (CONTRACT §3)."""

from servers.api.servers import ServerSerializer, ServerViewSet

__all__ = ["ServerSerializer", "ServerViewSet"]
