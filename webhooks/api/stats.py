"""`GET /webhooks/{id}/stats`: an endpoint's health over a recent window."""

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.authentication import calling_key
from accounts.scopes import Scope
from gshost.api.fields import TimestampField
from webhooks.api.views import _WebhookRoutes
from webhooks.health.stats import (
    DEFAULT_WINDOW,
    WINDOW_PATTERN,
    Bucket,
    WebhookStats,
    webhook_stats,
    webhook_stats_for_servers,
)
from webhooks.selectors import webhook_get_for_org


class BucketOutput(serializers.Serializer[Bucket]):
    at = TimestampField()
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField()


class LatencyOutput(serializers.Serializer[WebhookStats]):
    p50 = serializers.IntegerField(source="latency_p50_ms", allow_null=True)
    p95 = serializers.IntegerField(source="latency_p95_ms", allow_null=True)


class StatsOutput(serializers.Serializer[WebhookStats]):
    window = serializers.CharField()
    deliveries = serializers.IntegerField()
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField()
    pending = serializers.IntegerField(help_text="Pending or waiting for a retry.")
    success_rate = serializers.FloatField(
        allow_null=True, help_text="Succeeded / (succeeded + failed); null when none settled."
    )
    latency_ms = LatencyOutput(
        source="*", help_text="First attempt to final success, over the succeeded deliveries."
    )
    series = BucketOutput(many=True, help_text="One bucket per hour, or per day beyond 48h.")


WINDOW_PARAMETER = OpenApiParameter(
    "window",
    str,
    description="`<n>h` or `<n>d`, from 1h to 7d (168h); default 24h.",
    pattern=WINDOW_PATTERN,
)


class WebhookStatsViewSet(_WebhookRoutes):
    serializer_class = StatsOutput
    scopes = {"retrieve": Scope.WEBHOOKS_READ}

    @extend_schema(operation_id="webhooks_stats", parameters=[WINDOW_PARAMETER])
    def retrieve(self, request: Request, webhook_id: str) -> Response:
        key = calling_key(request)
        webhook = webhook_get_for_org(key.organization_id, webhook_id)
        window = request.query_params.get("window", DEFAULT_WINDOW)
        if key.server_restrictions:  # counted over the key's servers only
            stats = webhook_stats_for_servers(webhook.id, window, key.server_restrictions)
        else:
            stats = webhook_stats(webhook.id, window)
        body: dict[str, Any] = dict(StatsOutput(stats).data)
        return Response(body)
