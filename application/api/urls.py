"""Routes of /api/application/v1 (docs/application-api.md)."""

from typing import Any

from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request
from rest_framework.response import Response

from application.api.base import ApplicationView
from application.api.customers import CustomersView, CustomerView, LoginLinkView
from application.api.nodes import NodesView
from application.api.plans import PlansView, PlanView
from application.api.schema import IntegrationKeyScheme
from application.api.servers import ServerActionView, ServersView, ServerView
from application.server_actions import ServerAction
from gshost.api.errors import not_found

SCHEMA_SETTINGS = {
    "TITLE": "gshost Application API",
    "DESCRIPTION": "For billing systems: customers, plans, servers, nodes, login links. "
    "Integration keys (gsi_...) only.",
    "SCHEMA_PATH_PREFIX": "/api/application/v1",
    "PREPROCESSING_HOOKS": ["application.api.schema.application_routes_only"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "application.api.schema.postprocess",
    ],
}


__all__ = ["IntegrationKeyScheme", "urlpatterns"]  # the scheme registers itself on import


class ApplicationSchemaView(SpectacularAPIView):
    """YAML by default; JSON with `?format=json`."""

    authentication_classes = []
    permission_classes = []
    content_negotiation_class = DefaultContentNegotiation
    custom_settings = SCHEMA_SETTINGS


class ApplicationDocsView(SpectacularSwaggerView):
    authentication_classes = []
    permission_classes = []


class UnknownRouteView(ApplicationView):
    """Any other path under the prefix: authenticated (and so audited) like the rest."""

    scopes = {m.upper(): "" for m in ApplicationView.http_method_names}
    schema = None

    def check_permissions(self, request: Request) -> None:
        """Any key may learn that a route does not exist."""

    def _not_found(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        raise not_found("No such route.")

    get = post = put = patch = delete = head = _not_found


def _action(action: ServerAction) -> Any:
    return ServerActionView.as_view(action_name=action)


urlpatterns = [
    path("schema/", ApplicationSchemaView.as_view(), name="application.schema"),
    path(
        "docs/",
        ApplicationDocsView.as_view(url_name="application.schema"),
        name="application.docs",
    ),
    path("customers", CustomersView.as_view(), name="application.customers"),
    path("customers/<str:customer_id>", CustomerView.as_view(), name="application.customer"),
    path(
        "customers/<str:customer_id>/login-link",
        LoginLinkView.as_view(),
        name="application.customer.login_link",
    ),
    path("plans", PlansView.as_view(), name="application.plans"),
    path("plans/<str:plan_id>", PlanView.as_view(), name="application.plan"),
    path("servers", ServersView.as_view(), name="application.servers"),
    path("servers/<str:server_id>", ServerView.as_view(), name="application.server"),
    path(
        "servers/<str:server_id>/suspend",
        _action(ServerAction.SUSPEND),
        name="application.server.suspend",
    ),
    path(
        "servers/<str:server_id>/unsuspend",
        _action(ServerAction.UNSUSPEND),
        name="application.server.unsuspend",
    ),
    path(
        "servers/<str:server_id>/reinstall",
        _action(ServerAction.REINSTALL),
        name="application.server.reinstall",
    ),
    path("nodes", NodesView.as_view(), name="application.nodes"),
    re_path(r"^.*$", UnknownRouteView.as_view(), name="application.unknown"),
]
