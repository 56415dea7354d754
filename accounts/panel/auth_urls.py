from django.contrib.auth import views as auth_views
from django.urls import path

from accounts.panel.access import Open, open_to
from accounts.panel.forms import EmailAuthenticationForm

urlpatterns = [
    path(
        "login/",
        open_to(Open.PUBLIC)(
            auth_views.LoginView.as_view(
                template_name="accounts/login.html",
                authentication_form=EmailAuthenticationForm,
                redirect_authenticated_user=True,
            )
        ),
        name="login",
    ),
    path("logout/", open_to(Open.PUBLIC)(auth_views.LogoutView.as_view()), name="logout"),
]
