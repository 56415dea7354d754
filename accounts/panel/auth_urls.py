"""Routes under /accounts/: signing in and out, and the person's own account pages."""

from django.contrib.auth import views as auth_views
from django.urls import path

from accounts.panel import security, sessions, signin_views, ssh_keys
from accounts.panel.access import Open, open_to

urlpatterns = [
    path("login/", signin_views.SignInView.as_view(), name="login"),
    path("login/second-factor/", signin_views.second_factor_step, name="login_second_factor"),
    path(
        "login/passkey/options/",
        signin_views.passkey_sign_in_options,
        name="login_passkey_options",
    ),
    path("login/passkey/", signin_views.passkey_sign_in, name="login_passkey"),
    path("logout/", open_to(Open.PUBLIC)(auth_views.LogoutView.as_view()), name="logout"),
    path("security/", security.security_page, name="security"),
    path("security/totp/", security.totp_add, name="security_totp_add"),
    path("security/totp/remove/", security.totp_delete, name="security_totp_remove"),
    path(
        "security/recovery-codes/",
        security.recovery_codes_show,
        name="security_recovery_codes",
    ),
    path(
        "security/recovery-codes/renew/",
        security.recovery_codes_renew,
        name="security_recovery_codes_renew",
    ),
    path(
        "security/passkeys/options/",
        security.passkey_registration_options,
        name="security_passkey_options",
    ),
    path("security/passkeys/", security.passkey_add, name="security_passkey_add"),
    path(
        "security/passkeys/<int:passkey_id>/remove/",
        security.passkey_delete,
        name="security_passkey_remove",
    ),
    path("security/password/", security.password_change, name="security_password"),
    path("security/organization/", security.organization_rule, name="security_organization"),
    path("ssh-keys/", ssh_keys.ssh_key_list, name="ssh_keys"),
    path("ssh-keys/<int:ssh_key_id>/remove/", ssh_keys.ssh_key_delete, name="ssh_key_remove"),
    path("sessions/", sessions.session_list, name="sessions"),
    path("sessions/<int:session_id>/end/", sessions.session_end, name="session_end"),
    path("sessions/end-others/", sessions.sessions_end_others, name="sessions_end_others"),
]
