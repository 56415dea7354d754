"""Project checks for `manage.py check --deploy`, beside Django's own security checks."""

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.module_loading import import_string


@register(Tags.security, deploy=True)
def webhook_secret_keys_set(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    if settings.WEBHOOK_SECRET_KEYS:
        return []
    return [
        Warning(
            "WEBHOOK_SECRET_KEYS is not set: the key encrypting webhook signing secrets is "
            "derived from SECRET_KEY, so rotating SECRET_KEY would lose every signing secret.",
            hint="Set WEBHOOK_SECRET_KEYS to one or more Fernet keys (the first encrypts).",
            id="gshost.W001",
        )
    ]


@register(Tags.security, deploy=True)
def webhook_allowed_networks_unset(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """WEBHOOK_ALLOWED_NETWORKS exempts addresses from the send-time check that keeps webhooks
    off private networks: meant for development and tests, a hole in production."""
    if settings.DEBUG or not settings.WEBHOOK_ALLOWED_NETWORKS:
        return []
    networks = ", ".join(settings.WEBHOOK_ALLOWED_NETWORKS)
    return [
        Warning(
            f"WEBHOOK_ALLOWED_NETWORKS is set ({networks}) with DEBUG off: webhooks may be sent "
            "to these addresses, private ones included, past the resolved-address check.",
            hint="Leave WEBHOOK_ALLOWED_NETWORKS empty in production.",
            id="gshost.W002",
        )
    ]


@register(Tags.security, deploy=True)
def csrf_middleware_installed(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """Django's security.W003 looks for CsrfViewMiddleware by name and is silenced because the
    panel uses a subclass; this check keeps the guarantee: some CsrfViewMiddleware is in
    MIDDLEWARE."""
    for path in settings.MIDDLEWARE:
        middleware = import_string(path)
        if isinstance(middleware, type) and issubclass(middleware, CsrfViewMiddleware):
            return []
    return [
        Warning(
            "No CSRF middleware (CsrfViewMiddleware or a subclass) is in MIDDLEWARE: the panel's "
            "forms are not protected against cross-site request forgery.",
            id="gshost.W003",
        )
    ]
