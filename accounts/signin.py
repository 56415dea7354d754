"""Sign-in throttling (django-axes): an account is locked after LOGIN_FAILURE_LIMIT failed
sign-ins, a client address after LOGIN_FAILURE_ADDRESS_LIMIT, both for LOGIN_LOCKOUT_MINUTES.

django-axes keeps the failure rows (visible and clearable by staff in admin) and refuses a
locked sign-in before the password is checked; this module gives it our two limits, our
client-address rule (trusted proxies only) and our 429 page.
"""

from datetime import datetime, timedelta
from typing import Any

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Max, QuerySet, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from gshost.api.client_ip import client_ip

Credentials = dict[str, Any] | None


def client_address(request: HttpRequest) -> str | None:
    """The address django-axes counts: REMOTE_ADDR, or X-Forwarded-For from TRUSTED_PROXIES."""
    return client_ip(request)


def account_name(request: HttpRequest, credentials: Credentials) -> str:
    """The account a sign-in names, normalised so `Alice@…` and `alice@…` count together."""
    field = settings.AXES_USERNAME_FORM_FIELD
    raw = (credentials or {}).get(field) or request.POST.get(field, "")
    return str(raw).strip().lower()


def cool_off() -> timedelta:
    return timedelta(minutes=settings.LOGIN_LOCKOUT_MINUTES)


def _recent(request: HttpRequest) -> QuerySet[AccessAttempt]:
    return AccessAttempt.objects.filter(attempt_time__gte=get_cool_off_threshold(request))


def _sum(attempts: QuerySet[AccessAttempt]) -> int:
    return attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0


class AccountAndAddressHandler(AxesDatabaseHandler):
    """Two limits where django-axes has one: an address over its own (higher) limit counts
    as a locked account, so every lock decision of django-axes sees both."""

    def get_failures(self, request: HttpRequest, credentials: Credentials = None) -> int:
        recent = _recent(request)
        by_account = _sum(recent.filter(username=get_client_username(request, credentials)))
        address = getattr(request, "axes_ip_address", None)
        by_address = _sum(recent.filter(ip_address=address)) if address else 0
        if by_address >= settings.LOGIN_FAILURE_ADDRESS_LIMIT:
            return max(by_account, settings.LOGIN_FAILURE_LIMIT)
        return by_account

    def user_logged_in(self, sender: Any, request: HttpRequest, user: Any, **kwargs: Any) -> None:
        """A success clears the account's failures (not the address's other accounts')."""
        super().user_logged_in(sender, request, user, **kwargs)
        AccessAttempt.objects.filter(username=user.get_username().strip().lower()).delete()


def locked_until(request: HttpRequest, credentials: Credentials) -> datetime:
    """When the lock ends: the latest counted failure plus the lockout period."""
    recent = _recent(request)
    mine = recent.filter(username=get_client_username(request, credentials))
    address = getattr(request, "axes_ip_address", None)
    if address:
        mine = mine | recent.filter(ip_address=address)
    latest = mine.aggregate(latest=Max("attempt_time"))["latest"] or timezone.now()
    return latest + cool_off()


def lockout_response(
    request: HttpRequest, original: HttpResponse | None = None, credentials: Credentials = None
) -> HttpResponse:
    """429 with the time to try again (in the page and in Retry-After)."""
    until = locked_until(request, credentials)
    seconds = max(1, int((until - timezone.now()).total_seconds() + 0.999))
    context = {"until": until, "minutes": (seconds + 59) // 60}
    response = render(request, "accounts/locked_out.html", context, status=429)
    response["Retry-After"] = str(seconds)
    return response
