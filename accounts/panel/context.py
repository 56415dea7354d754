from typing import Any

from django.http import HttpRequest

from accounts.panel.organization import current_membership
from accounts.selectors import memberships_of


def current_organization(request: HttpRequest) -> dict[str, Any]:
    """The organization the panel is acting in, and the others the person can switch to."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    membership = current_membership(request)
    return {
        "current_membership": membership,
        "current_organization": membership.organization if membership else None,
        "memberships": list(memberships_of(user.pk).order_by("organization__name")),
    }
