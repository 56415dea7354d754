"""Schemathesis hooks of the conformance run (loaded through SCHEMATHESIS_HOOKS).

Every check runs, with its default expectations. The schema says all that JSON Schema can; what
it cannot say is handled here, for positive (schema-valid) cases only, and only this:

- A cursor is an opaque token the API issued: a client sends back what it received. A generated
  cursor that fits the schema is replaced by one the API could have issued; one that does not
  fit it is left as generated, and the API refuses it.
- A webhook URL must also pass the URL rules (a public host, no private address), and a console
  command must be printable text: the rules are applied with the service's own code, and a case
  they refuse (422, 400) is not generated as a valid one.
"""

import base64
import json
import re
from typing import Any

import schemathesis

from webhooks.targets.url_safety import UnsafeWebhookUrl, check_webhook_url

MAX_COMMAND_LENGTH = 1000
CURSOR = re.compile(r"[A-Za-z0-9_-]+")  # the schema's pattern (gshost.api.schema)
MAX_CURSOR_LENGTH = 512


def _positive(case: Any) -> bool:
    meta = getattr(case, "meta", None)
    return meta is not None and meta.generation.mode.is_positive


def issued_cursor(seed: str) -> str:
    """A cursor of the shape the API issues (gshost.api.pagination), varied by `seed`."""
    payload = {"t": "2026-11-22T10:00:00+00:00", "i": "0", "b": len(seed) % 2 == 1}
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    """A cursor the schema accepts becomes one the API issued, in every phase; one it refuses
    stays (and the API refuses it too). Schemathesis re-judges the case after this edit."""
    query = case.query
    cursor = query.get("cursor") if isinstance(query, dict) else None
    if isinstance(cursor, str) and len(cursor) <= MAX_CURSOR_LENGTH and CURSOR.fullmatch(cursor):
        query["cursor"] = issued_cursor(cursor)


def _url_allowed(url: Any) -> bool:
    if not isinstance(url, str):
        return True
    try:
        check_webhook_url(url)
    except UnsafeWebhookUrl:
        return False
    return True


def _command_allowed(command: Any) -> bool:
    if not isinstance(command, str):
        return True
    command = command.strip()
    return bool(command) and len(command) <= MAX_COMMAND_LENGTH and command.isprintable()


@schemathesis.hook
def filter_case(context: Any, case: Any) -> bool:
    body = case.body
    if not _positive(case) or not isinstance(body, dict):
        return True
    if "url" in body and not _url_allowed(body["url"]):
        return False
    return not ("command" in body and not _command_allowed(body["command"]))
