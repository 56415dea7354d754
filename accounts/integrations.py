"""Routes for partners, outside the Customer API: GitHub's secret-scanning alerts.

`POST /integrations/secret-scanning/github` takes a JSON array of `{"token", "type", "url",
"source"}`, signed by GitHub (see `accounts.secret_scanning`), and answers one verdict per
token. No bearer key (GitHub has none of ours), no CSRF token (no cookies either): the
signature is the authentication, checked over the raw body before anything else is read.
"""

import json
import logging
from enum import StrEnum
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.debug import sensitive_variables
from django.views.decorators.http import require_POST

from accounts.errors import KeysUnavailable, SignatureRefused
from accounts.leaks import LeakLabel, leak_context, leaked_token_handle, token_hash
from accounts.models import LeakSource
from accounts.secret_scanning import verify_alert

logger = logging.getLogger(__name__)

MAX_ALERT_BYTES = 1024 * 1024
RETRY_AFTER_SECONDS = 60


class AlertError(StrEnum):
    INVALID_REQUEST = "invalid_request"
    INVALID_SIGNATURE = "invalid_signature"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    KEYS_UNAVAILABLE = "keys_unavailable"


def _error(status: int, code: AlertError, message: str) -> JsonResponse:
    response = JsonResponse({"error": {"code": code.value, "message": message}}, status=status)
    if status == 503:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def _raw_body(request: HttpRequest) -> bytes | None:
    """The body as sent, or None when it is over MAX_ALERT_BYTES (read no further than that)."""
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > MAX_ALERT_BYTES:
        return None
    body = request.read(MAX_ALERT_BYTES + 1)
    return None if len(body) > MAX_ALERT_BYTES else body


@sensitive_variables()
def _alerts(body: bytes) -> list[dict[str, Any]] | None:
    """The alert's entries, each with a string token; None if the body is not that."""
    try:
        alerts = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(alerts, list):
        return None
    if not all(isinstance(a, dict) and isinstance(a.get("token"), str) for a in alerts):
        return None
    return alerts


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


@sensitive_variables()
def _verdict(request: HttpRequest, alert: dict[str, Any]) -> dict[str, str]:
    token = alert["token"]
    label = leaked_token_handle(
        token=token,
        source=LeakSource.GITHUB_SECRET_SCANNING,
        context=leak_context(request, _text(alert.get("url"))),
    )
    return {"token_hash": token_hash(token), "token_type": _text(alert.get("type")), "label": label}


@csrf_exempt
@require_POST
@sensitive_variables()
def github_secret_scanning(request: HttpRequest) -> HttpResponse:
    body = _raw_body(request)
    if body is None:
        return _error(413, AlertError.PAYLOAD_TOO_LARGE, "The body is larger than 1 MiB.")
    try:
        verify_alert(
            body,
            request.headers.get("Github-Public-Key-Identifier", ""),
            request.headers.get("Github-Public-Key-Signature", ""),
        )
    except SignatureRefused as refused:
        logger.warning("Refused a secret-scanning alert: %s", refused)
        return _error(401, AlertError.INVALID_SIGNATURE, "The signature is missing or wrong.")
    except KeysUnavailable as unavailable:
        logger.warning("Cannot check a secret-scanning alert: %s", unavailable)
        return _error(
            503, AlertError.KEYS_UNAVAILABLE, "GitHub's public keys cannot be fetched; retry."
        )
    alerts = _alerts(body)
    if alerts is None:
        return _error(
            400, AlertError.INVALID_REQUEST, "The body must be an array of objects with a token."
        )
    verdicts = [_verdict(request, alert) for alert in alerts]
    found = sum(v["label"] == LeakLabel.TRUE_POSITIVE for v in verdicts)
    logger.info("Secret-scanning alert: %d tokens, %d of ours", len(verdicts), found)
    return JsonResponse(verdicts, safe=False)


app_name = "integrations"
urlpatterns = [
    path("secret-scanning/github", github_secret_scanning, name="github_secret_scanning"),
]
