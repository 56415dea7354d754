"""Panel access: one permission model for every panel page and action.

Every panel view declares what it needs, exactly as the API's viewsets declare a scope:
`needs_scope(Scope.X)` for a scope, `needs_scope(ReadAndChange(...))` for a page shown with one
scope whose form posts back to it to change with another, `needs_scope(AllOf(...))` for a page
that needs several scopes, or `open_to(Open.…)` for the few
pages that are not bounded by a scope (the sign-in page, the organization switch, and key
actions whose rule is the key service's own: see docs/security.md). A view under /panel/ or
/accounts/ that declares nothing is refused (403) by `PanelPermissionMiddleware`, and a test
walks every panel URL pattern to catch it before it ships.
"""

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import wraps
from typing import Any, Concatenate, ParamSpec, TypeVar

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.models import Membership
from accounts.panel.organization import current_membership
from accounts.scopes import Scope

P = ParamSpec("P")
V = TypeVar("V", bound=Callable[..., Any])
MemberView = Callable[Concatenate[HttpRequest, Membership, P], HttpResponse]

PERMISSION_ATTRIBUTE = "panel_permission"


class Open(StrEnum):
    """Declarations for panel views that no single scope bounds."""

    PUBLIC = "public"  # anyone, signed in or not: the sign-in page, redirects
    SIGNED_IN = "signed in"  # any signed-in person (switching organization)
    # Any member; the service applies the action's own rule to the person's scopes
    # (key creation, rotation, deletion and the key list).
    MEMBER_BY_SERVICE_RULE = "member, by the service's rule"


SAFE_METHODS = frozenset({"GET", "HEAD"})


@dataclass(frozen=True)
class ReadAndChange:
    """A page shown with ``read`` whose form posts back to it: a POST changes (``change``) and
    shows the page again, so it needs both."""

    read: Scope
    change: Scope

    def scopes_for(self, method: str | None) -> tuple[Scope, ...]:
        return (self.read,) if method in SAFE_METHODS else (self.read, self.change)


@dataclass(frozen=True)
class AllOf:
    """A page that needs every one of ``scopes``, whatever the method (a schedule's command is
    a console command: writing one needs ``console:write`` too)."""

    scopes: tuple[Scope, ...]

    def scopes_for(self, method: str | None) -> tuple[Scope, ...]:
        return self.scopes


PanelPermission = Scope | Open | ReadAndChange | AllOf
ScopeNeeded = Scope | ReadAndChange | AllOf


def declare(permission: PanelPermission) -> Callable[[V], V]:
    """Record the view's permission (functools.wraps carries it through outer decorators)."""

    def decorate(view: V) -> V:
        setattr(view, PERMISSION_ATTRIBUTE, permission)
        return view

    return decorate


def permission_of(view: Callable[..., Any]) -> PanelPermission | None:
    """The declared permission of a view (or of a class-based view's `view_class`)."""
    declared = getattr(view, PERMISSION_ATTRIBUTE, None)
    if declared is None and hasattr(view, "view_class"):
        declared = getattr(view.view_class, PERMISSION_ATTRIBUTE, None)
    return declared if isinstance(declared, (Scope, Open, ReadAndChange, AllOf)) else None


def open_to(permission: Open) -> Callable[[V], V]:
    return declare(permission)


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


def needs_scope(scope: ScopeNeeded) -> Callable[[MemberView[P]], MemberView[P]]:
    """Refuse (403) a person whose membership does not hold `scope` (for a `ReadAndChange`,
    those the request's method needs); declares `scope`."""

    def decorate(view: MemberView[P]) -> MemberView[P]:
        @wraps(view)
        def wrapper(
            request: HttpRequest, membership: Membership, *args: P.args, **kwargs: P.kwargs
        ) -> HttpResponse:
            needed = [scope] if isinstance(scope, Scope) else scope.scopes_for(request.method)
            missing = [s for s in needed if s not in membership.held_scopes]
            if missing:
                return scope_refused(request, missing[0])
            return view(request, membership, *args, **kwargs)

        return declare(scope)(wrapper)

    return decorate


def member_with_scope(
    scope: Scope,
) -> Callable[[MemberView[P]], Callable[Concatenate[HttpRequest, P], HttpResponse]]:
    """Sign-in, a membership of the current organization, and `scope` in it."""

    def decorate(view: MemberView[P]) -> Callable[Concatenate[HttpRequest, P], HttpResponse]:
        return member_required(needs_scope(scope)(view))

    return decorate


def undeclared_refused(request: HttpRequest) -> HttpResponse:
    """Fail closed: a panel view that declares no permission answers 403 to everyone."""
    return render(request, "accounts/undeclared.html", status=403)


PANEL_PREFIXES = ("/panel/", "/accounts/")


class PanelPermissionMiddleware:
    """Fail closed: a panel view that declares no permission is refused before it runs.

    Declarations are made with this module's `needs_scope` and `open_to`.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponse | None:
        if not request.path_info.startswith(PANEL_PREFIXES):
            return None
        if permission_of(view_func) is None:
            return undeclared_refused(request)
        return None
