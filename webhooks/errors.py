"""The errors webhook code refuses with; the API and the panel each answer them in one place."""

from gshost.errors import (
    DomainError,
    InvalidInput,
    LimitReached,
    NotFound,
    RateLimited,
    RefusedValue,
)


class WebhookNotFound(NotFound):
    """The same for a webhook that never existed and another organization's."""

    default_message = "No such webhook."


class DeliveryNotFound(NotFound):
    """Not one of the webhook's deliveries of the last 7 days."""

    default_message = "No such delivery."


class ServerOutsideRestrictions(NotFound):
    """A restricted caller filtered by a server it may not see: told exactly what a server
    that does not exist would be told."""

    code = "server_not_found"
    default_message = "No such server."


class WebhookRequestRefused(DomainError):
    """A webhook request the rules refuse; each subclass is one kind of gshost.errors."""


class InvalidWebhookRequest(WebhookRequestRefused, InvalidInput):
    """invalid_request: `fields` maps each field at fault to its messages."""

    def __init__(self, fields: dict[str, list[str]]) -> None:
        super().__init__("The request is not valid.", fields=fields)
        self.fields = fields


class UnsafeWebhookUrl(WebhookRequestRefused, RefusedValue):
    """invalid_webhook_url, naming the first rule the URL breaks: refused when a webhook is
    saved, and again when a delivery is about to connect."""

    code = "invalid_webhook_url"

    def __init__(self, reason: str, message: str) -> None:
        """`reason` is one of `webhooks.targets.url_safety.UrlRejection`."""
        super().__init__(message, reason=reason, field="url")
        self.reason = reason


class UnknownEvents(WebhookRequestRefused, RefusedValue):
    """unknown_event: `names` are the subscribed names outside the catalogue."""

    code = "unknown_event"

    def __init__(self, names: list[str]) -> None:
        super().__init__("Unknown event names: " + ", ".join(names), fields={"events": names})
        self.names = names


class WebhookLimitReached(WebhookRequestRefused, LimitReached):
    """limit_reached: the organization has WEBHOOKS_PER_ORGANIZATION webhooks already."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"An organization can have at most {limit} webhooks.", limit=limit)
        self.limit = limit


class PingLimitReached(RateLimited):
    """Every test-ping slot of the organization is taken; try again in `retry_after` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(retry_after=retry_after)
        self.retry_after = retry_after


WINDOW_RULE = "From 1h to 7d, written like 6h or 3d."


class InvalidWindow(InvalidInput):
    """The stats window is not `<n>h` or `<n>d` between 1h and 7d."""

    def __init__(self, window: str) -> None:
        super().__init__("The window is not valid.", fields={"window": [WINDOW_RULE]})
        self.window = window
