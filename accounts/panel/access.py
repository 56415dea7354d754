"""Panel access: a signed-in person acting in one of their organizations."""

from collections.abc import Callable
from functools import wraps
from typing import Concatenate, ParamSpec

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.models import Membership
from accounts.panel.organization import current_membership

P = ParamSpec("P")
MemberView = Callable[Concatenate[HttpRequest, Membership, P], HttpResponse]


def member_required(view: MemberView[P]) -> Callable[Concatenate[HttpRequest, P], HttpResponse]:
    """Sign-in required; the view receives the membership it acts through.

    A person who belongs to no organization gets a friendly page instead of an error.
    """

    @wraps(view)
    def wrapper(request: HttpRequest, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
        membership = current_membership(request)
        if membership is None:
            return render(request, "accounts/no_membership.html", status=403)
        return view(request, membership, *args, **kwargs)

    return login_required(wrapper)


def scope_refused(request: HttpRequest, scope: str) -> HttpResponse:
    """403 page: the person's membership does not hold `scope`."""
    return render(request, "accounts/scope_refused.html", {"scope": scope}, status=403)


def needs_scope(scope: str) -> Callable[[MemberView[P]], MemberView[P]]:
    """Refuse (403) a person whose membership does not hold `scope`."""

    def decorate(view: MemberView[P]) -> MemberView[P]:
        @wraps(view)
        def wrapper(
            request: HttpRequest, membership: Membership, *args: P.args, **kwargs: P.kwargs
        ) -> HttpResponse:
            if scope not in membership.held_scopes:
                return scope_refused(request, scope)
            return view(request, membership, *args, **kwargs)

        return wrapper

    return decorate
