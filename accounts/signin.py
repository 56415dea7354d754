"""Sign-in throttling (django-axes), three limits within LOGIN_LOCKOUT_MINUTES:

- LOGIN_FAILURE_LIMIT failures of one account from one client address lock that pair;
- LOGIN_FAILURE_ADDRESS_LIMIT failures from one address (any accounts) lock the address;
- LOGIN_FAILURE_ACCOUNT_LIMIT failures of one account (any addresses) lock the account for every
  address, and its owner is told by email.

Keying the account's own lock on the address too is what keeps a stranger from locking an owner
out: guessing from one address locks only that address. Attempts refused during a lock are not
recorded (AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT off), so they do not extend it.

django-axes keeps the failure rows (visible and clearable by staff in admin) and refuses a
locked sign-in before the password is checked; this module gives it our limits, our
client-address rule (trusted proxies only) and our 429 page.
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt
from django.conf import settings
from django.core.mail import send_mail
from django.db.models import Max, Q, QuerySet, Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone

from accounts.models import Membership, Role
from gshost.api.client_ip import client_ip

logger = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class FailureGroups:
    """The failure rows each limit counts, for one sign-in attempt."""

    pair: Q
    address: Q
    account: Q

    @classmethod
    def of(cls, request: HttpRequest, credentials: Credentials) -> "FailureGroups":
        account = Q(username=get_client_username(request, credentials))
        address = getattr(request, "axes_ip_address", None)
        # Sign-ins whose address is unknown count together, as one address.
        by_address = Q(ip_address=address) if address else Q(ip_address__isnull=True)
        return cls(pair=account & by_address, address=by_address, account=account)

    def by_limit(self) -> dict[str, tuple[Q, int]]:
        return {
            "pair": (self.pair, settings.LOGIN_FAILURE_LIMIT),
            "address": (self.address, settings.LOGIN_FAILURE_ADDRESS_LIMIT),
            "account": (self.account, settings.LOGIN_FAILURE_ACCOUNT_LIMIT),
        }

    def locked(self, request: HttpRequest) -> dict[str, bool]:
        """Which limits are reached, by name ("pair", "address", "account")."""
        limits = self.by_limit()
        counts = _recent(request).aggregate(
            **{
                name: Sum("failures_since_start", filter=rows, default=0)
                for name, (rows, _) in limits.items()
            }
        )
        return {name: counts[name] >= limit for name, (_, limit) in limits.items()}


class AccountAndAddressHandler(AxesDatabaseHandler):
    """Three limits where django-axes has one: whichever is reached counts as reaching
    django-axes' own limit, so every lock decision of django-axes sees all three."""

    def get_failures(self, request: HttpRequest, credentials: Credentials = None) -> int:
        if any(FailureGroups.of(request, credentials).locked(request).values()):
            return int(settings.AXES_FAILURE_LIMIT)
        return 0

    def user_login_failed(
        self, sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any
    ) -> None:
        """Record the failure; email the owner when it locks the account for every address."""
        counted = request is not None and not getattr(request, "axes_locked_out", False)
        scopes = FailureGroups.of(request, credentials) if counted else None
        was_locked = scopes is not None and scopes.locked(request)["account"]
        super().user_login_failed(sender, credentials, request, **kwargs)
        if scopes is not None and not was_locked and scopes.locked(request)["account"]:
            account_locked(get_client_username(request, credentials), timezone.now() + cool_off())

    def user_logged_in(self, sender: Any, request: HttpRequest, user: Any, **kwargs: Any) -> None:
        """A success clears the failures of this account from this address (not the address's
        other accounts', nor the account's failures from elsewhere)."""
        super().user_logged_in(sender, request, user, **kwargs)
        username = user.get_username().strip().lower()
        address = getattr(request, "axes_ip_address", None)
        AccessAttempt.objects.filter(username=username, ip_address=address).delete()


def account_locked(account: str, until: datetime) -> None:
    """Tell the person behind `account`, if they own an organization, that it is locked.

    Never raises: the email is a courtesy, the lock holds without it.
    """
    owners = Membership.objects.filter(user__email__iexact=account, role=Role.OWNER)
    emails = sorted(set(owners.values_list("user__email", flat=True)))
    if not emails:
        return
    minutes = settings.LOGIN_LOCKOUT_MINUTES
    limit = settings.LOGIN_FAILURE_ACCOUNT_LIMIT
    body = "\n".join(
        [
            f"Your gshost account {emails[0]} has had {limit} or more failed sign-ins",
            f"in the last {minutes} minutes, from several addresses.",
            f"To protect it, nobody can sign in to it until {until:%Y-%m-%d %H:%M} UTC,",
            "the right password included.",
            "",
            "If this was not you, someone is guessing your password: consider changing it once",
            "you can sign in again. Staff can clear the lock in admin (Axes -> Access attempts).",
        ]
    )
    try:
        send_mail("[gshost] Your account is locked for a while", body, None, emails)
    except Exception:
        logger.exception("Could not email the sign-in lock notice")


def locked_until(request: HttpRequest, credentials: Credentials) -> datetime:
    """When the lock ends: the latest failure counted by a reached limit, plus the lockout
    period (refused attempts are not recorded, so they do not move it)."""
    scopes = FailureGroups.of(request, credentials)
    reached = [scopes.by_limit()[name][0] for name, hit in scopes.locked(request).items() if hit]
    rows = Q(pk__in=[])
    for scope in reached or [scopes.pair | scopes.account]:
        rows |= scope
    latest = _recent(request).filter(rows).aggregate(latest=Max("attempt_time"))["latest"]
    return (latest or timezone.now()) + cool_off()


def lockout_response(
    request: HttpRequest, original: HttpResponse | None = None, credentials: Credentials = None
) -> HttpResponse:
    """429 with the time to try again (in the page and in Retry-After)."""
    until, seconds = _lock_left(request, credentials)
    context = {"until": until, "minutes": (seconds + 59) // 60}
    response = render(request, "accounts/locked_out.html", context, status=429)
    response["Retry-After"] = str(seconds)
    return response


def lockout_json(request: HttpRequest, credentials: Credentials) -> JsonResponse:
    """The same for the passkey step's script: 429, the time in the message and Retry-After."""
    until, seconds = _lock_left(request, credentials)
    minutes = (seconds + 59) // 60
    message = (
        f"Too many failed attempts: try again after {until:%H:%M} UTC "
        f"(in about {minutes} minute{'s' if minutes != 1 else ''})."
    )
    response = JsonResponse({"error": message}, status=429)
    response["Retry-After"] = str(seconds)
    return response


def _lock_left(request: HttpRequest, credentials: Credentials) -> tuple[datetime, int]:
    until = locked_until(request, credentials)
    return until, max(1, int((until - timezone.now()).total_seconds() + 0.999))
