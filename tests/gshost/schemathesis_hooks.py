"""Schemathesis hooks of the conformance run (loaded through SCHEMATHESIS_HOOKS).

Every check runs, with its default expectations. The schema says all that JSON Schema can (a
cursor's whole shape, a webhook URL's scheme, host, port and characters); what it cannot say is
handled here, for positive (schema-valid) cases only, and only this: a webhook URL must also
pass the URL rules (a public host, no private address), and a console command must be printable
text. The rules are applied with the service's own code, and a case they refuse (422, 400) is
not generated as a valid one.
"""

from typing import Any

import schemathesis

from webhooks.targets.url_safety import UnsafeWebhookUrl, check_webhook_url

MAX_COMMAND_LENGTH = 1000


def _positive(case: Any) -> bool:
    meta = getattr(case, "meta", None)
    return meta is not None and meta.generation.mode.is_positive


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
