"""Panel pages for webhooks, mounted at /panel/webhooks/. Thin: parse, one service, render.

A person acts in their current organization and needs the scope the API would ask of a key:
webhooks:read to look, webhooks:write to create or delete, webhooks:manage to edit, test and
redeliver. Another organization's webhook is a 404, like one that does not exist.
"""

import json
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import re_path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.models import Membership
from accounts.panel.access import MemberView, member_required, needs_scope
from accounts.scopes import Scope
from audit.actors import Actor
from audit.services import PanelContext
from gshost.api.errors import domain_status
from gshost.panel_errors import found_or_404
from webhooks.errors import PingLimitReached, WebhookRequestRefused
from webhooks.health.stats import DEFAULT_WINDOW, webhook_stats
from webhooks.models import Delivery, DeliveryStatus, Webhook
from webhooks.panel.chart import health_chart
from webhooks.panel.forms import DeliveryFilterForm, SecretRollForm, WebhookForm
from webhooks.payloads import parse_body
from webhooks.selectors import (
    delivery_get_for_webhook,
    delivery_list_for_webhook,
    webhook_get_for_org,
    webhook_list_for_org,
)
from webhooks.services import (
    deliveries_request_bulk_redelivery,
    delivery_request_redelivery,
    webhook_create,
    webhook_delete,
    webhook_roll_secret,
    webhook_send_test,
    webhook_update,
)

P = ParamSpec("P")
GET_OR_POST = ["GET", "POST"]
DELIVERIES_PER_PAGE = 50


def member_view(
    scope: Scope,
) -> Callable[[MemberView[P]], Callable[Concatenate[HttpRequest, P], HttpResponse]]:
    """Sign-in, a membership of the current organization, and `scope` in it."""

    def decorate(view: MemberView[P]) -> Callable[Concatenate[HttpRequest, P], HttpResponse]:
        return member_required(needs_scope(scope)(view))

    return decorate


def _webhook_or_404(membership: Membership, webhook_id: str) -> Webhook:
    return found_or_404(webhook_get_for_org, membership.organization_id, webhook_id)


def _delivery_or_404(
    membership: Membership, webhook_id: str, delivery_id: str
) -> tuple[Webhook, Delivery]:
    webhook = _webhook_or_404(membership, webhook_id)
    return webhook, found_or_404(delivery_get_for_webhook, webhook, delivery_id)


@require_GET
@member_view(Scope.WEBHOOKS_READ)
def webhook_list(request: HttpRequest, membership: Membership) -> HttpResponse:
    webhooks = webhook_list_for_org(membership.organization_id).order_by("-created_at", "-id")
    return render(request, "webhooks/list.html", {"webhooks": webhooks})


def _render_form(
    request: HttpRequest,
    form: WebhookForm,
    webhook: Webhook | None = None,
    status: int = 200,
    error_code: str = "",
) -> HttpResponse:
    context = {"form": form, "webhook": webhook, "error_code": error_code}
    return render(request, "webhooks/form.html", context, status=status)


@never_cache  # the answer to a successful POST holds the signing secret
@require_http_methods(GET_OR_POST)
@member_view(Scope.WEBHOOKS_WRITE)
def webhook_create_page(request: HttpRequest, membership: Membership) -> HttpResponse:
    form = WebhookForm(request.POST if request.method == "POST" else None)
    if not form.is_bound:
        return _render_form(request, form)
    if not form.is_valid():
        return _render_form(request, form, status=400)
    try:
        webhook, secret = webhook_create(
            organization=membership.organization,
            actor=Actor.person(PanelContext.from_request(request)),
            **form.webhook_fields(),
        )
    except WebhookRequestRefused as refused:
        code = form.add_refusal(refused)
        return _render_form(request, form, status=domain_status(refused), error_code=code)
    context = {"webhook": webhook, "signing_secret": secret}
    return render(request, "webhooks/created.html", context)


@require_http_methods(GET_OR_POST)
@member_view(Scope.WEBHOOKS_MANAGE)
def webhook_edit(request: HttpRequest, membership: Membership, webhook_id: str) -> HttpResponse:
    webhook = _webhook_or_404(membership, webhook_id)
    if request.method != "POST":
        initial = {"url": webhook.url, "events": webhook.events, "description": webhook.description}
        return _render_form(request, WebhookForm(initial=initial), webhook)
    form = WebhookForm(request.POST)
    if not form.is_valid():
        return _render_form(request, form, webhook, status=400)
    try:
        webhook_update(
            webhook=webhook,
            actor=Actor.person(PanelContext.from_request(request)),
            **form.webhook_fields(),
        )
    except WebhookRequestRefused as refused:
        code = form.add_refusal(refused)
        return _render_form(request, form, webhook, domain_status(refused), code)
    messages.success(request, f"Webhook {webhook.id} is saved.")
    return redirect("webhooks_panel:list")


@require_http_methods(GET_OR_POST)
@member_view(Scope.WEBHOOKS_WRITE)
def webhook_delete_page(
    request: HttpRequest, membership: Membership, webhook_id: str
) -> HttpResponse:
    webhook = _webhook_or_404(membership, webhook_id)
    if request.method != "POST":
        return render(request, "webhooks/delete.html", {"webhook": webhook})
    webhook_delete(webhook=webhook, actor=Actor.person(PanelContext.from_request(request)))
    messages.success(request, f"Webhook {webhook.id} ({webhook.url}) is deleted.")
    return redirect("webhooks_panel:list")


@never_cache  # the answer to a successful POST holds the new signing secret
@require_http_methods(GET_OR_POST)
@member_view(Scope.WEBHOOKS_MANAGE)
def webhook_roll_secret_page(
    request: HttpRequest, membership: Membership, webhook_id: str
) -> HttpResponse:
    webhook = _webhook_or_404(membership, webhook_id)
    form = SecretRollForm(request.POST if request.method == "POST" else None)
    if not form.is_valid():
        status = 400 if form.is_bound else 200
        context = {"webhook": webhook, "form": form}
        return render(request, "webhooks/roll_secret.html", context, status=status)
    webhook, secret = webhook_roll_secret(
        webhook=webhook,
        grace_hours=form.cleaned_data["grace_hours"],
        actor=Actor.person(PanelContext.from_request(request)),
    )
    context = {"webhook": webhook, "signing_secret": secret}
    return render(request, "webhooks/secret_rolled.html", context)


@never_cache
@require_POST
@member_view(Scope.WEBHOOKS_MANAGE)
def webhook_test_page(
    request: HttpRequest, membership: Membership, webhook_id: str
) -> HttpResponse:
    webhook = _webhook_or_404(membership, webhook_id)
    try:
        result = webhook_send_test(
            webhook=webhook, actor=Actor.person(PanelContext.from_request(request))
        )
    except PingLimitReached as busy:
        context = {"webhook": webhook, "busy": busy}
        response = render(request, "webhooks/test_result.html", context, status=429)
        response["Retry-After"] = str(busy.retry_after)
        return response
    return render(request, "webhooks/test_result.html", {"webhook": webhook, "result": result})


@require_GET
@member_view(Scope.WEBHOOKS_READ)
def delivery_list(request: HttpRequest, membership: Membership, webhook_id: str) -> HttpResponse:
    webhook = _webhook_or_404(membership, webhook_id)
    form = DeliveryFilterForm(request.GET)
    if not form.is_valid():
        context = {"webhook": webhook, "form": form, "page": None}
        return render(request, "webhooks/deliveries.html", context, status=400)
    deliveries = delivery_list_for_webhook(webhook, **form.filters()).order_by("-created_at", "-id")
    page = Paginator(deliveries.prefetch_related("attempts"), DELIVERIES_PER_PAGE).get_page(
        request.GET.get("page")
    )
    query = request.GET.copy()
    query.pop("page", None)
    stats = webhook_stats(webhook.id, DEFAULT_WINDOW)
    context = {
        "webhook": webhook,
        "form": form,
        "page": page,
        "query": query.urlencode(),
        "stats": stats,
        "chart": health_chart(stats.series),
    }
    return render(request, "webhooks/deliveries.html", context)


def _pretty(payload: Any) -> str:
    return json.dumps(payload, indent=2, ensure_ascii=False)


@require_GET
@member_view(Scope.WEBHOOKS_READ)
def delivery_detail(
    request: HttpRequest, membership: Membership, webhook_id: str, delivery_id: str
) -> HttpResponse:
    webhook, delivery = _delivery_or_404(membership, webhook_id, delivery_id)
    payload = parse_body(delivery.body)
    context = {
        "webhook": webhook,
        "delivery": delivery,
        "payload": payload if isinstance(payload, str) else _pretty(payload),
        "attempts": delivery.attempts.all(),  # in number order (the model's ordering)
    }
    return render(request, "webhooks/delivery.html", context)


@require_POST
@member_view(Scope.WEBHOOKS_MANAGE)
def delivery_redeliver(
    request: HttpRequest, membership: Membership, webhook_id: str, delivery_id: str
) -> HttpResponse:
    webhook, delivery = _delivery_or_404(membership, webhook_id, delivery_id)
    delivery_request_redelivery(
        delivery=delivery, actor=Actor.person(PanelContext.from_request(request))
    )
    messages.success(request, f"Delivery {delivery.id} will be sent again in a moment.")
    return redirect("webhooks_panel:delivery", webhook_id=webhook.id, delivery_id=delivery.id)


@require_POST
@member_view(Scope.WEBHOOKS_MANAGE)
def deliveries_redeliver_failed(
    request: HttpRequest, membership: Membership, webhook_id: str
) -> HttpResponse:
    webhook = _webhook_or_404(membership, webhook_id)
    count = deliveries_request_bulk_redelivery(
        webhook=webhook,
        status=DeliveryStatus.FAILED,
        actor=Actor.person(PanelContext.from_request(request)),
    )
    messages.success(
        request, f"{count} failed deliver{'y' if count == 1 else 'ies'} will be sent again."
    )
    return redirect("webhooks_panel:deliveries", webhook_id=webhook.id)


app_name = "webhooks_panel"

WEBHOOK = r"(?P<webhook_id>whk_[0-9A-Za-z]{1,40})"
DELIVERY = r"(?P<delivery_id>dlv_[0-9A-Za-z]{1,40})"

urlpatterns = [
    re_path(r"^$", webhook_list, name="list"),
    re_path(r"^new/?$", webhook_create_page, name="create"),
    re_path(rf"^{WEBHOOK}/edit/?$", webhook_edit, name="edit"),
    re_path(rf"^{WEBHOOK}/delete/?$", webhook_delete_page, name="delete"),
    re_path(rf"^{WEBHOOK}/test/?$", webhook_test_page, name="test"),
    re_path(rf"^{WEBHOOK}/secret/roll/?$", webhook_roll_secret_page, name="roll_secret"),
    re_path(rf"^{WEBHOOK}/deliveries/?$", delivery_list, name="deliveries"),
    re_path(
        rf"^{WEBHOOK}/deliveries/redeliver-failed/?$",
        deliveries_redeliver_failed,
        name="redeliver_failed",
    ),
    re_path(rf"^{WEBHOOK}/deliveries/{DELIVERY}/?$", delivery_detail, name="delivery"),
    re_path(
        rf"^{WEBHOOK}/deliveries/{DELIVERY}/redeliver/?$",
        delivery_redeliver,
        name="redeliver",
    ),
]
