"""Schemathesis hooks of the conformance run (loaded through SCHEMATHESIS_HOOKS).

The API treats `limit` above 100 as 100 and an empty `limit=` as the default (both documented in
docs/pagination-and-rate-limits.md), so such a case is not an input the service must refuse.
This check is the built-in `negative_data_rejection` for every other case; the run disables the
built-in one.
"""

from typing import Any

import schemathesis
from schemathesis.specs.openapi.checks import negative_data_rejection

MAX_LIMIT = 100


def _lenient_limit(case: Any) -> bool:
    limit = (case.query or {}).get("limit")
    if limit is None:
        return False
    if str(limit) == "":
        return True
    try:
        return int(str(limit)) > MAX_LIMIT
    except ValueError:
        return False


@schemathesis.check
def negative_data_rejection_but_clamped_limit(ctx: Any, response: Any, case: Any) -> bool | None:
    if _lenient_limit(case):
        return None
    return negative_data_rejection(ctx, response, case)
