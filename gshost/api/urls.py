from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from accounts.api import KeyViewSet
from audit.api import AuditViewSet
from gshost.api.views import UnknownRouteView
from servers.api import ServerViewSet


class PublicSchemaView(SpectacularAPIView):
    authentication_classes = []
    permission_classes = []


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
    path("account/audit", AuditViewSet.as_view({"get": "list"}), name="account.audit.list"),
    path("servers", ServerViewSet.as_view({"get": "list"}), name="servers.list"),
    path(
        "servers/<str:server_id>",
        ServerViewSet.as_view({"get": "retrieve"}),
        name="servers.retrieve",
    ),
]

# Must stay last: everything else under the prefix answers 404 not_found in the envelope.
catch_all = [re_path(r"^.*$", UnknownRouteView.as_view(), name="unknown")]
