"""Panel pages for API keys and the organization switcher. Thin: parse, one service, render."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from accounts.errors import (
    KeyDeletionRefused,
    KeyNotRotatable,
    KeyRequestRefused,
    ScopeExceedsPermissions,
)
from accounts.models import ApiKey, Membership
from accounts.panel.access import Open, member_required, open_to
from accounts.panel.forms import KeyCreateForm, KeyRotateForm
from accounts.panel.organization import current_membership, switch_organization
from accounts.panel.presenters import key_rows, scope_tags, unrecognized_tags
from accounts.selectors import api_key_get, api_key_list_for_person
from accounts.services import (
    NewKey,
    api_key_check_deletable,
    api_key_check_rotatable,
    api_key_create,
    api_key_delete,
    api_key_rotate,
)
from audit.actors import Actor
from audit.services import PanelContext
from gshost.api.errors import domain_status
from gshost.panel_errors import found_or_404
from servers.selectors import server_list_for_organization

GET_OR_POST = ["GET", "POST"]


def _server_names(membership: Membership) -> dict[str, str]:
    servers = server_list_for_organization(membership.organization_id).order_by("name", "id")
    return dict(servers.values_list("id", "name"))


def _key_or_404(membership: Membership, key_id: str) -> ApiKey:
    """The key, if it belongs to the organization the person is acting in."""
    return found_or_404(api_key_get, membership.organization_id, key_id)


KeyFormRefusal = KeyRequestRefused | ScopeExceedsPermissions | KeyNotRotatable


def _add_refusal(form: KeyCreateForm | KeyRotateForm, refused: KeyFormRefusal) -> str:
    """The refusal on the form; its code when it names a rule rather than a bad value."""
    form.add_error(refused.field if refused.field in form.fields else None, refused.message)
    return "" if isinstance(refused, KeyRequestRefused) else refused.code


def _render_new_key(
    request: HttpRequest, new: NewKey, replaced: ApiKey | None = None
) -> HttpResponse:
    """The one and only time the full key is shown (never cached: see `never_cache`)."""
    context = {
        "new": new,
        "scopes": scope_tags(new.key.scopes),
        "warnings": unrecognized_tags(new.key.scopes),
        "replaced": replaced,
        "now": timezone.now(),
    }
    return render(request, "accounts/keys/created.html", context)


@require_http_methods(["GET"])
@open_to(Open.MEMBER_BY_SERVICE_RULE)
@member_required
def key_list(request: HttpRequest, membership: Membership) -> HttpResponse:
    keys = api_key_list_for_person(membership).order_by("-created_at", "-id")
    rows = key_rows(keys, _server_names(membership), timezone.now())
    return render(request, "accounts/keys/list.html", {"rows": rows})


def _render_create_form(
    request: HttpRequest, form: KeyCreateForm, status: int, error_code: str = ""
) -> HttpResponse:
    context = {"form": form, "error_code": error_code}
    return render(request, "accounts/keys/new.html", context, status=status)


@never_cache
@require_http_methods(GET_OR_POST)
@open_to(Open.MEMBER_BY_SERVICE_RULE)
@member_required
def key_create(request: HttpRequest, membership: Membership) -> HttpResponse:
    form = KeyCreateForm(
        request.POST if request.method == "POST" else None,
        held_scopes=membership.held_scopes,
        servers=list(_server_names(membership).items()),
    )
    if not form.is_bound:
        return _render_create_form(request, form, 200)
    if not form.is_valid():
        return _render_create_form(request, form, 400)
    try:
        new = api_key_create(
            membership=membership,
            actor=Actor.person(PanelContext.from_request(request)),
            **form.key_request(),
        )
    except (KeyRequestRefused, ScopeExceedsPermissions) as refused:
        code = _add_refusal(form, refused)
        return _render_create_form(request, form, domain_status(refused), error_code=code)
    return _render_new_key(request, new)


def _render_rotate_form(
    request: HttpRequest, key: ApiKey, form: KeyRotateForm, status: int = 200
) -> HttpResponse:
    rows = key_rows([key], {}, timezone.now())
    context = {"key": key, "row": rows[0], "form": form}
    return render(request, "accounts/keys/rotate.html", context, status=status)


@never_cache
@require_http_methods(GET_OR_POST)
@open_to(Open.MEMBER_BY_SERVICE_RULE)
@member_required
def key_rotate(request: HttpRequest, membership: Membership, key_id: str) -> HttpResponse:
    key = _key_or_404(membership, key_id)
    if request.method != "POST":
        try:
            api_key_check_rotatable(membership=membership, key=key)
        except ScopeExceedsPermissions as refused:
            return _refused(request, refused)
        return _render_rotate_form(request, key, KeyRotateForm())
    form = KeyRotateForm(request.POST)
    if not form.is_valid():
        return _render_rotate_form(request, key, form, 400)
    try:
        new = api_key_rotate(
            key=key,
            membership=membership,
            grace_hours=form.cleaned_data["grace_hours"],
            actor=Actor.person(PanelContext.from_request(request)),
        )
    except ScopeExceedsPermissions as refused:
        return _refused(request, refused)
    except (KeyRequestRefused, KeyNotRotatable) as refused:
        _add_refusal(form, refused)
        return _render_rotate_form(request, key, form, domain_status(refused))
    key.refresh_from_db()
    return _render_new_key(request, new, replaced=key)


def _refused(
    request: HttpRequest, refused: ScopeExceedsPermissions | KeyDeletionRefused
) -> HttpResponse:
    """The refusal's code and message; the key's details are not shown."""
    context = {"error_code": refused.code, "message": refused.message}
    return render(request, "accounts/keys/refused.html", context, status=domain_status(refused))


@require_http_methods(GET_OR_POST)
@open_to(Open.MEMBER_BY_SERVICE_RULE)
@member_required
def key_delete(request: HttpRequest, membership: Membership, key_id: str) -> HttpResponse:
    key = _key_or_404(membership, key_id)
    try:
        if request.method != "POST":
            api_key_check_deletable(membership=membership, key=key)
            row = key_rows([key], {}, timezone.now())[0]
            return render(request, "accounts/keys/delete.html", {"key": key, "row": row})
        api_key_delete(
            key=key, membership=membership, actor=Actor.person(PanelContext.from_request(request))
        )
    except KeyDeletionRefused as refused:
        return _refused(request, refused)
    messages.success(request, f"Key “{key.name}” ({key.key_id}) is revoked for good.")
    return redirect("panel:key_list")


def _next_url(request: HttpRequest) -> str:
    wanted = request.POST.get("next", "")
    safe = url_has_allowed_host_and_scheme(
        wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return wanted if wanted and safe else reverse("panel:key_list")


@require_POST
@open_to(Open.SIGNED_IN)
@login_required
def organization_switch(request: HttpRequest) -> HttpResponse:
    """Act in another organization, only one the person belongs to."""
    if not switch_organization(request, request.POST.get("organization", "")):
        return render(request, "accounts/switch_refused.html", status=403)
    membership = current_membership(request)
    if membership is not None:
        messages.info(request, f"Now acting in {membership.organization.name}.")
    return redirect(_next_url(request))
