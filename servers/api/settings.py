"""Settings history and drift, and the status of scheduled config events."""

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.authentication import RATE_TIER_REALTIME
from accounts.scopes import Scope
from servers.api.base import NODE_UNAVAILABLE, ServerRouteViewSet
from servers.api.serializers import (
    ConfigEventsStatusSerializer,
    DriftSerializer,
    SettingChangeSerializer,
)
from servers.game.capabilities import Capability
from servers.readings import config_events_status, settings_drift
from servers.selectors import setting_changes_for_server


class SettingsViewSet(ServerRouteViewSet):
    scopes = {"history": Scope.SERVERS_READ, "drift": Scope.SERVERS_READ}
    capability_of_action = {"history": Capability.SETTINGS, "drift": Capability.SETTINGS}

    @extend_schema(responses=SettingChangeSerializer(many=True))
    def history(self, request: Request, server_id: str) -> Response:
        changes = setting_changes_for_server(self.server())
        return self.paginated(changes, SettingChangeSerializer, ordering_field="changed_at")

    @extend_schema(responses=DriftSerializer, extensions=NODE_UNAVAILABLE)
    def drift(self, request: Request, server_id: str) -> Response:
        return Response(DriftSerializer(settings_drift(self.server())).data)


class ConfigEventsStatusViewSet(ServerRouteViewSet):
    """600 requests a minute per key, instead of the default tier."""

    rate_tier = RATE_TIER_REALTIME
    scopes = {"status": Scope.SERVERS_READ}
    capability_of_action = {"status": Capability.CONFIG_EVENTS}

    @extend_schema(responses=ConfigEventsStatusSerializer)
    def status(self, request: Request, server_id: str) -> Response:
        body = config_events_status(self.server())
        return Response(ConfigEventsStatusSerializer(body).data)
