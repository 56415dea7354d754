"""Panel access to a server: signed in, acting in the server's organization, holding the
scope the API would ask of a key. Another organization's server is a 404."""

from collections.abc import Callable
from functools import wraps
from typing import Concatenate, ParamSpec

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from accounts.models import Membership
from accounts.panel.access import ScopeNeeded, member_required, needs_scope
from audit.actors import Actor
from audit.services import PanelContext
from gshost.api.errors import domain_status
from gshost.errors import DomainError
from gshost.panel_errors import refusal_message
from servers.game.capabilities import Capability, capability_require
from servers.models import Server
from servers.selectors import server_list_for_organization

P = ParamSpec("P")
ServerView = Callable[Concatenate[HttpRequest, Membership, Server, P], HttpResponse]
PanelView = Callable[Concatenate[HttpRequest, str, P], HttpResponse]


def server_page(
    scope: ScopeNeeded, capability: Capability | None = None
) -> Callable[[ServerView[P]], PanelView[P]]:
    def decorate(view: ServerView[P]) -> PanelView[P]:
        @wraps(view)
        def wrapper(
            request: HttpRequest,
            membership: Membership,
            server_id: str,
            *args: P.args,
            **kwargs: P.kwargs,
        ) -> HttpResponse:
            servers = server_list_for_organization(membership.organization_id)
            server = servers.filter(id=server_id).first()
            if server is None:
                raise Http404("No such server in this organization.")
            if capability is not None:
                try:
                    capability_require(server, capability)
                except DomainError as refusal:
                    context = {"server": server, "error": refusal}
                    status = domain_status(refusal)
                    return render(request, "servers/unavailable.html", context, status=status)
            return view(request, membership, server, *args, **kwargs)

        return member_required(needs_scope(scope)(wrapper))

    return decorate


def person(request: HttpRequest) -> Actor:
    return Actor.person(PanelContext.from_request(request))


def back_to(name: str, server: Server) -> HttpResponse:
    return redirect(name, server_id=server.id)


def refused(request: HttpRequest, refusal: DomainError) -> None:
    """A service's refusal, shown as a message on the page the person goes back to."""
    messages.error(request, refusal_message(refusal))
