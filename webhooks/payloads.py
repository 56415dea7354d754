"""The body of an event delivery: built once, stored, and re-sent byte for byte.

Member order is part of the contract (`event`, `occurred_at`, `server`, `data`,
`delivery_id`); `json.dumps` keeps the order of the literal below, and a test pins the bytes.
"""

import json
from datetime import datetime
from typing import Any

from gshost.ids import format_timestamp
from webhooks.events import Event


def render_json(value: Any) -> str:
    """Compact JSON, UTF-8 characters kept as they are (the receiver signs the raw bytes)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def event_body(
    *,
    event: Event,
    occurred_at: datetime,
    server_id: str,
    server_name: str,
    data: dict[str, Any],
    delivery_id: str,
) -> str:
    return render_json(
        {
            "event": event.value,
            "occurred_at": format_timestamp(occurred_at),
            "server": {"id": server_id, "name": server_name},
            "data": data,
            "delivery_id": delivery_id,
        }
    )


def parse_body(body: str) -> Any:
    """The stored body as JSON (for the delivery record); the text itself if it is not JSON."""
    try:
        return json.loads(body)
    except ValueError:
        return body
