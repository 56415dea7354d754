"""Polling routes: players, realtime stats, metrics and migration status."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.authentication import RATE_TIER_REALTIME
from accounts.scopes import Scope
from servers.api.base import NODE_UNAVAILABLE, ServerRouteViewSet
from servers.api.serializers import (
    MetricsSerializer,
    MigrationStatusSerializer,
    PlayersSerializer,
    StatsSerializer,
)
from servers.game.capabilities import Capability
from servers.readings import (
    WINDOW_PATTERN,
    metrics_read,
    migration_status,
    parse_window,
    players_read,
    stats_read,
)


class ServerReadingsViewSet(ServerRouteViewSet):
    scopes = {
        "players": Scope.SERVERS_READ,
        "metrics": Scope.SERVERS_READ,
        "migration_status": Scope.SERVERS_READ,
    }
    capability_of_action = {
        "players": Capability.PLAYERS,
        "metrics": Capability.METRICS,
        "migration_status": Capability.MIGRATION,
    }

    @extend_schema(responses=PlayersSerializer, extensions=NODE_UNAVAILABLE)
    def players(self, request: Request, server_id: str) -> Response:
        return Response(PlayersSerializer(players_read(self.server())).data)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "window",
                OpenApiTypes.STR,
                description="Minutes or hours, like 30m or 6h, from 5m to 24h; default 1h.",
                pattern=WINDOW_PATTERN,
            )
        ],
        responses=MetricsSerializer,
    )
    def metrics(self, request: Request, server_id: str) -> Response:
        server = self.server()
        label, window = parse_window(request.query_params.get("window"))
        step, samples = metrics_read(server, window)
        body = {
            "server_id": server.id,
            "window": label,
            "interval_seconds": int(step.total_seconds()),
            "samples": samples,
        }
        return Response(MetricsSerializer(body).data)

    @extend_schema(responses=MigrationStatusSerializer)
    def migration_status(self, request: Request, server_id: str) -> Response:
        return Response(MigrationStatusSerializer(migration_status(self.server())).data)


class RealtimeStatsViewSet(ServerRouteViewSet):
    """600 requests a minute per key, instead of the default tier."""

    rate_tier = RATE_TIER_REALTIME
    scopes = {"stats": Scope.SERVERS_READ}
    capability_of_action = {"stats": Capability.METRICS}

    @extend_schema(responses=StatsSerializer, extensions=NODE_UNAVAILABLE)
    def stats(self, request: Request, server_id: str) -> Response:
        server = self.server()
        sample = stats_read(server)
        return Response(StatsSerializer({"server_id": server.id, **vars(sample)}).data)
