from django.contrib import admin
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from application.api.urls import UnknownRouteView as UnknownApplicationRoute
from gshost.api.urls import bare_prefix, catch_all
from gshost.api.urls import urlpatterns as api_patterns
from gshost.api.views import HealthView
from gshost.monitoring.views import metrics_view, readyz

handler500 = "gshost.server_errors.server_error"

urlpatterns = [
    path("healthz", HealthView.as_view(), name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    # The public API next: it is the hot path, and its prefix is unambiguous. Its routes are
    # listed here with the prefix rather than through include(): one resolver level less on
    # every call.
    *(
        path(f"api/public/v1/{route.pattern}", route.callback, route.default_args, route.name)
        for route in api_patterns
    ),
    path("api/public/v1/", include(catch_all)),
    *bare_prefix,
    # The Application API (billing systems, integration keys): a surface of its own.
    path("api/application/v1/", include("application.api.urls")),
    re_path(r"^api/application/v1$", UnknownApplicationRoute.as_view()),
    path("", RedirectView.as_view(url="/panel/keys/", permanent=False)),
    # Staff sign in through the panel's sign-in (password, then a second factor).
    path("admin/login/", include("accounts.panel.admin_login_urls")),
    path("admin/", admin.site.urls),
    path("integrations/", include("accounts.integrations")),
    # Agents of the nodes report here (bearer node token; not the public API).
    path("internal/nodes/", include("servers.agents.urls")),
    path("accounts/login/", include("application.panel")),
    path("api/node/v1/", include("servers.agents.node_urls")),
    path("accounts/", include("accounts.panel.auth_urls")),
    path("panel/webhooks/", include("webhooks.panel.views")),
    path("panel/servers/", include("servers.panel.urls")),
    path("panel/audit/", include("audit.panel")),
    path("panel/", include("accounts.panel.urls")),
]
