"""The kinds of refusal domain code raises, in the domain's words (no HTTP here).

Each app names its own errors by subclassing one of these kinds (`servers.errors`,
`webhooks.errors`); the edges turn a kind into an answer once: the API's exception handler
(`gshost.api.errors`) and the panel (`gshost.panel_errors`). `code` is the machine-readable
name a client sees, `message` the sentence a person reads, `extra` any facts that go with it.
"""

from typing import Any, ClassVar


class DomainError(Exception):
    code: ClassVar[str] = "invalid_request"
    default_message: ClassVar[str] = "The request is not valid."

    def __init__(self, message: str | None = None, **extra: Any) -> None:
        self.message = message or self.default_message
        self.extra = extra
        super().__init__(self.message)


class NotFound(DomainError):
    """The object does not exist, or the caller may not see it: the two look the same."""

    code = "not_found"
    default_message = "Not found."


class InvalidState(DomainError):
    """The object exists but its current state does not allow what was asked."""

    code = "invalid_state"


class NotSupported(DomainError):
    """What was asked cannot be done on this object at all."""

    code = "not_supported"


class NotEnabled(DomainError):
    """What was asked could be done, but is turned off for this object."""

    code = "feature_not_enabled"


class Unavailable(DomainError):
    """What was asked depends on something that cannot be reached now; `retry_after` (in
    `extra`) says when to try again."""

    code = "unavailable"


class RefusedValue(DomainError):
    """The request is well formed, but a rule refuses a value in it (the subclass names which)."""


class LimitReached(DomainError):
    """The caller already has as many of these as allowed; `limit` (in `extra`) says how many."""

    code = "limit_reached"


class NotPermitted(DomainError):
    """The caller may not do this; `required_scope` and `rule` (in `extra`) say why."""

    code = "insufficient_scope"
    default_message = "Not permitted."


class RateLimited(DomainError):
    """Too many of these are under way at once; `retry_after` (in `extra`) says when to try
    again."""

    code = "rate_limited"
    default_message = "Too many requests; retry after the time given in Retry-After."


class InvalidInput(DomainError):
    """A value given by the caller is not acceptable; `fields` (in `extra`) says which."""

    code = "invalid_request"


class TooLarge(DomainError):
    """What was asked is too big for this route (the message says what to use instead)."""

    code = "payload_too_large"


class Misuse(DomainError):
    """Code called something where it must never be called: a bug to fix, not a refusal of
    the caller's request (the API answers 500 internal_error and logs it)."""

    code = "internal_error"
    default_message = "Something went wrong on our side. Retry later."


class CalledInsideTransaction(Misuse):
    """A call to another machine (an agent, the bucket, a webhook's receiver) made inside a
    database transaction: it would hold the transaction, and its row locks, for as long as
    the other machine takes, and its effect could not be rolled back with the rows."""
