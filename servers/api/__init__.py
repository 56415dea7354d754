"""The server routes of the Customer API."""

from servers.api.servers import ServerSerializer, ServerViewSet

__all__ = ["ServerSerializer", "ServerViewSet"]
