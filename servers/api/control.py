"""POST /servers/{id}/power, POST /servers/{id}/console, GET /servers/{id}/capabilities."""

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.authentication import calling_key
from accounts.scopes import Scope
from gshost.api.input import parse_input
from servers.api.base import NODE_UNAVAILABLE, ServerRouteViewSet
from servers.api.serializers import (
    CapabilitiesSerializer,
    ConsoleInput,
    ConsoleSentSerializer,
    PowerInput,
)
from servers.api.servers import ServerSerializer
from servers.game.capabilities import Capability, capabilities_of
from servers.services import PowerAction, server_power, server_send_command


class ServerControlViewSet(ServerRouteViewSet):
    scopes = {
        "power": Scope.SERVERS_POWER,
        "console": Scope.CONSOLE_WRITE,
        "capabilities": Scope.SERVERS_READ,
    }
    capability_of_action = {"power": Capability.POWER, "console": Capability.CONSOLE}

    @extend_schema(
        request=PowerInput, responses={202: ServerSerializer}, extensions=NODE_UNAVAILABLE
    )
    def power(self, request: Request, server_id: str) -> Response:
        server = self.server()
        action = PowerAction(parse_input(request, PowerInput)["action"])
        server = server_power(server=server, action=action, actor=self.actor())
        return Response(ServerSerializer(server).data, status=202)

    @extend_schema(
        request=ConsoleInput, responses={202: ConsoleSentSerializer}, extensions=NODE_UNAVAILABLE
    )
    def console(self, request: Request, server_id: str) -> Response:
        server = self.server()
        command = parse_input(request, ConsoleInput)["command"]
        sent = server_send_command(server=server, command=command, actor=self.actor())
        return Response(ConsoleSentSerializer(sent).data, status=202)

    @extend_schema(responses=CapabilitiesSerializer)
    def capabilities(self, request: Request, server_id: str) -> Response:
        server = self.server()
        granted = calling_key(request).granted_scopes
        return Response({"server_id": server.id, "capabilities": capabilities_of(server, granted)})
