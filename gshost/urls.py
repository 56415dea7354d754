from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from gshost.api.urls import bare_prefix, catch_all
from gshost.api.views import HealthView

urlpatterns = [
    path("healthz", HealthView.as_view(), name="healthz"),
    # The public API next: it is the hot path, and its prefix is unambiguous.
    path("api/public/v1/", include("gshost.api.urls")),
    path("api/public/v1/", include(catch_all)),
    *bare_prefix,
    path("", RedirectView.as_view(url="/panel/keys/", permanent=False)),
    path("admin/", admin.site.urls),
    path("accounts/", include("accounts.panel.auth_urls")),
    path("panel/webhooks/", include("webhooks.panel")),
    path("panel/servers/", include("servers.panel.urls")),
    path("panel/", include("accounts.panel.urls")),
]
