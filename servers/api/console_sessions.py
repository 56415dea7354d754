"""POST /servers/{id}/console/sessions: a token to open the server's console websocket."""

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.authentication import calling_key
from accounts.scopes import Scope
from gshost.api.fields import TimestampField
from servers.agents.console_tokens import console_session_issue
from servers.api.base import ServerRouteViewSet
from servers.game.capabilities import Capability


class ConsoleSessionSerializer(serializers.Serializer[Any]):
    url = serializers.CharField()
    token = serializers.CharField()
    expires_at = TimestampField()
    scopes = serializers.ListField(child=serializers.CharField())


class ConsoleSessionViewSet(ServerRouteViewSet):
    scopes = {"create": Scope.SERVERS_READ}
    capability_of_action = {"create": Capability.CONSOLE}

    @extend_schema(request=None, responses={201: ConsoleSessionSerializer})
    def create(self, request: Request, server_id: str) -> Response:
        server = self.server()
        key = calling_key(request)
        session = console_session_issue(
            server=server,
            granted=key.granted_scopes,
            key_id=key.key_id,
            subject_expires_at=key.expires_at,
        )
        return Response(ConsoleSessionSerializer(session).data, status=201)
