"""Panel routes, mounted at /panel/. Trailing slashes are optional on key actions."""

from django.urls import path, re_path
from django.views.generic import RedirectView

from accounts.panel import views
from accounts.panel.access import Open, open_to

app_name = "panel"

KEY_ID = r"(?P<key_id>[0-9A-Za-z]{8})"

urlpatterns = [
    path(
        "",
        open_to(Open.PUBLIC)(RedirectView.as_view(pattern_name="panel:key_list", permanent=False)),
    ),
    path("keys/", views.key_list, name="key_list"),
    re_path(r"^keys/new/?$", views.key_create, name="key_create"),
    re_path(rf"^keys/{KEY_ID}/rotate/?$", views.key_rotate, name="key_rotate"),
    re_path(rf"^keys/{KEY_ID}/delete/?$", views.key_delete, name="key_delete"),
    path("switch-organization/", views.organization_switch, name="switch_organization"),
]
