"""Which organization the signed-in person is acting in (kept in the session)."""

from django.http import HttpRequest

from accounts.models import Membership
from accounts.selectors import memberships_of

SESSION_KEY = "organization_id"


def _user_id(request: HttpRequest) -> int:
    return int(request.user.pk or 0)


def current_membership(request: HttpRequest) -> Membership | None:
    """Looked up once per request; "no membership" is remembered too."""
    if hasattr(request, "_current_membership"):
        cached: Membership | None = request._current_membership
        return cached
    memberships = memberships_of(_user_id(request)).select_related("user")
    chosen = request.session.get(SESSION_KEY)
    membership = memberships.filter(organization_id=chosen).first() if chosen else None
    membership = membership or memberships.order_by("organization__name").first()
    request._current_membership = membership  # type: ignore[attr-defined]
    return membership


def switch_organization(request: HttpRequest, organization_id: str) -> bool:
    """Switch only to an organization the person belongs to."""
    if not memberships_of(_user_id(request)).filter(organization_id=organization_id).exists():
        return False
    request.session[SESSION_KEY] = organization_id
    if hasattr(request, "_current_membership"):
        del request._current_membership
    return True
