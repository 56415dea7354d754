from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.negotiation import DefaultContentNegotiation

from accounts.api import KeyViewSet, LeakReportView
from audit.api import AuditViewSet
from gshost.api.views import UnknownRouteView
from servers.api import ServerViewSet
from servers.api.urls import urlpatterns as server_routes
from webhooks.api.stats import WebhookStatsViewSet
from webhooks.api.views import DeliveryViewSet, WebhookViewSet


class PublicSchemaView(SpectacularAPIView):
    """YAML by default; JSON with `?format=json` or `Accept: application/vnd.oai.openapi+json`."""

    authentication_classes = []
    permission_classes = []
    content_negotiation_class = DefaultContentNegotiation


class PublicDocsView(SpectacularSwaggerView):
    authentication_classes = []
    permission_classes = []


urlpatterns = [
    path("schema/", PublicSchemaView.as_view(), name="schema"),
    path("docs/", PublicDocsView.as_view(url_name="schema"), name="docs"),
    path(
        "account/keys/current",
        KeyViewSet.as_view({"get": "current"}),
        name="account.keys.current",
    ),
    path("account/keys", KeyViewSet.as_view({"get": "list"}), name="account.keys.list"),
    path(
        "account/keys/<str:key_id>",
        KeyViewSet.as_view({"delete": "destroy"}),
        name="account.keys.revoke",
    ),
    path("keys/report-leaked", LeakReportView.as_view(), name="keys.report_leaked"),
    path("account/audit", AuditViewSet.as_view({"get": "list"}), name="account.audit.list"),
    path(
        "webhooks",
        WebhookViewSet.as_view({"get": "list", "post": "create"}),
        name="webhooks.list",
    ),
    path(
        "webhooks/<str:webhook_id>",
        WebhookViewSet.as_view({"get": "retrieve", "patch": "partial_update", "delete": "destroy"}),
        name="webhooks.detail",
    ),
    path(
        "webhooks/<str:webhook_id>/test",
        WebhookViewSet.as_view({"post": "test"}),
        name="webhooks.test",
    ),
    path(
        "webhooks/<str:webhook_id>/secret/rotate",
        WebhookViewSet.as_view({"post": "roll_secret"}),
        name="webhooks.secret.rotate",
    ),
    path(
        "webhooks/<str:webhook_id>/stats",
        WebhookStatsViewSet.as_view({"get": "retrieve"}),
        name="webhooks.stats",
    ),
    path(
        "webhooks/<str:webhook_id>/deliveries",
        DeliveryViewSet.as_view({"get": "list"}),
        name="webhooks.deliveries.list",
    ),
    # Before the delivery route: "redeliver" would otherwise be taken for a delivery id.
    path(
        "webhooks/<str:webhook_id>/deliveries/redeliver",
        DeliveryViewSet.as_view({"post": "bulk_redeliver"}),
        name="webhooks.deliveries.bulk_redeliver",
    ),
    path(
        "webhooks/<str:webhook_id>/deliveries/<str:delivery_id>",
        DeliveryViewSet.as_view({"get": "retrieve"}),
        name="webhooks.deliveries.detail",
    ),
    path(
        "webhooks/<str:webhook_id>/deliveries/<str:delivery_id>/redeliver",
        DeliveryViewSet.as_view({"post": "redeliver"}),
        name="webhooks.deliveries.redeliver",
    ),
    path("servers", ServerViewSet.as_view({"get": "list"}), name="servers.list"),
    path(
        "servers/<str:server_id>",
        ServerViewSet.as_view({"get": "retrieve"}),
        name="servers.retrieve",
    ),
    *server_routes,
]

# Must stay last: everything else under the prefix answers 404 not_found in the envelope.
catch_all = [re_path(r"^.*$", UnknownRouteView.as_view(), name="unknown")]
bare_prefix = [re_path(r"^api/public/v1$", UnknownRouteView.as_view(), name="unknown")]
