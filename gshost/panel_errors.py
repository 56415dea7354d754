"""How the panel answers a domain refusal, in one place for every panel page.

Not found is the panel's 404 page; any other refusal is shown to the person (a flash message,
or a page with the status the API would answer: `gshost.api.errors.domain_status`).
"""

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.http import Http404

from gshost.errors import DomainError, NotFound

P = ParamSpec("P")
T = TypeVar("T")


def found_or_404(get: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """A selector's NotFound as the panel's 404 page."""
    try:
        return get(*args, **kwargs)
    except NotFound as missing:
        raise Http404(missing.message) from None


def refusal_message(refusal: DomainError) -> str:
    return refusal.message
