"""/admin/login/ is the panel's own sign-in (one shared login: throttled, second factor)."""

from django.urls import path

from accounts.panel.signin_views import SignInView

urlpatterns = [path("", SignInView.as_view(), name="admin_login")]
