"""The panel's session, CSRF, auth and messages middleware, skipped for the public API.

The API is stateless (bearer keys, no cookies), so its requests never need a session, a
CSRF check, a panel user or flash messages; skipping them keeps every API call lighter.
"""

from csp.middleware import CSPMiddleware
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import CsrfViewMiddleware

from gshost.api.middleware import is_public_api


class PanelOnly:
    """Mixed in before a MiddlewareMixin class: public API requests pass straight through."""

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if is_public_api(request):
            response: HttpResponse = self.get_response(request)  # type: ignore[attr-defined]
            return response
        return super().__call__(request)  # type: ignore[misc]


class PanelSessionMiddleware(PanelOnly, SessionMiddleware):
    pass


class PanelCsrfViewMiddleware(PanelOnly, CsrfViewMiddleware):
    pass


class PanelAuthenticationMiddleware(PanelOnly, AuthenticationMiddleware):
    pass


class PanelMessageMiddleware(PanelOnly, MessageMiddleware):
    pass


class PanelCSPMiddleware(PanelOnly, CSPMiddleware):
    """Content-Security-Policy on panel and admin pages (the API answers JSON only)."""
