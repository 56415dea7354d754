"""The OpenAPI 3.1 ``webhooks`` section: the ten event deliveries and the test ping.

A drf-spectacular postprocessing hook. The JSON Schemas describe the bodies exactly (every
member required but those only agent nodes send, no others allowed), so a receiver can
validate what it gets; a test holds real deliveries made by the engine to them.
"""

from __future__ import annotations

from typing import Any, Final

from webhooks.events import Event

TIMESTAMP: Final = {
    "type": "string",
    "format": "date-time",
    "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$",
    "description": "ISO 8601 UTC with milliseconds.",
}
NULLABLE_STRING: Final = {"type": ["string", "null"]}


def _id(prefix: str) -> dict[str, Any]:
    return {"type": "string", "pattern": f"^{prefix}_[0-9A-Za-z]+$"}


def _object(properties: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every member of `properties` required, those of `optional` allowed, no others."""
    return {
        "type": "object",
        "properties": {**properties, **(optional or {})},
        "required": list(properties),
        "additionalProperties": False,
    }


def _enum(*values: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


EVENT_DATA: Final[dict[Event, dict[str, Any]]] = {
    Event.SERVER_STARTED: _object({"previous_state": _enum("starting")}),
    Event.SERVER_STOPPED: _object({"previous_state": _enum("stopping")}),
    Event.SERVER_RESTARTED: _object({}),
    Event.SERVER_CRASHED: _object(
        {
            "reason": _enum("exited", "failed_to_start", "disk_limit"),
            "exit_code": {"type": ["integer", "null"]},
            "will_restart": {
                "type": "boolean",
                "description": "The server is started again by itself 5 s later.",
            },
        },
        optional={
            "signal": {
                "type": ["integer", "null"],
                "description": "Agent nodes: the signal that ended the game, if one did.",
            },
            "oom": {
                "type": "boolean",
                "description": "Agent nodes: the kernel killed the game for memory.",
            },
            "last_output": {
                "type": "array",
                "items": {"type": "string", "maxLength": 200},
                "maxItems": 10,
                "description": "Agent nodes: the game's last console lines.",
            },
        },
    ),
    Event.CONSOLE_COMMAND_SENT: _object(
        {
            "command": {"type": "string"},
            "source": _enum("panel", "api"),
            "key_id": NULLABLE_STRING,
            "user": NULLABLE_STRING,
        }
    ),
    Event.COMMAND_SCHEDULE_EXECUTED: _object(
        {
            "schedule_id": _id("sch"),
            "schedule_name": {"type": "string"},
            "run_id": _id("run"),
            "trigger": _enum("schedule", "run_now"),
            "status": _enum("succeeded", "failed", "skipped"),
        }
    ),
    Event.COMMAND_SCHEDULE_ALERT: _object(
        {
            "schedule_id": _id("sch"),
            "schedule_name": {"type": "string"},
            "reason": _enum("run_status", "missed_runs"),
            "run_id": {"type": ["string", "null"], "pattern": "^run_[0-9A-Za-z]+$"},
            "status": {
                "type": ["string", "null"],
                "enum": ["succeeded", "failed", "skipped", None],
            },
            "missed_runs": {"type": ["integer", "null"], "minimum": 1},
        }
    ),
    Event.SERVER_MIGRATED: _object(
        {
            "previous_address": {"type": "string", "description": "ip:port"},
            "new_address": {"type": "string", "description": "ip:port"},
            "port_changed": {"type": "boolean"},
        }
    ),
    # Suspended or unsuspended by the Application API: the record says `suspended` too.
    Event.SERVER_SUSPENDED: _object({}),
    Event.SERVER_UNSUSPENDED: _object({}),
}

HEADERS: Final = {
    "X-Webhook-Signature": "Hex HMAC-SHA256 of `<X-Webhook-Timestamp>.<raw body>` (see docs).",
    "X-Webhook-Timestamp": "Unix seconds; fresh on every attempt.",
    "webhook-id": "Standard Webhooks: the delivery id (`dlv_…`), or `png_…` for a test ping.",
    "webhook-timestamp": "Standard Webhooks: the same value as X-Webhook-Timestamp.",
    "webhook-signature": "Standard Webhooks: `v1,<base64>` signatures, space-separated.",
}
EVENT_HEADERS: Final = {
    "X-Webhook-Event": "The event name.",
    "X-Webhook-Delivery": "The delivery id; the same on every attempt and redelivery.",
}


def schema_name(event: Event) -> str:
    return "WebhookEvent_" + event.value.replace(".", "_")


def event_schema(event: Event) -> dict[str, Any]:
    schema = _object(
        {
            "event": {"const": event.value},
            "occurred_at": TIMESTAMP,
            "server": _object({"id": _id("srv"), "name": {"type": "string"}}),
            "data": EVENT_DATA[event],
            "delivery_id": _id("dlv"),
        }
    )
    schema["description"] = f"The body of a `{event.value}` delivery (compact JSON, this order)."
    return schema


def ping_schema() -> dict[str, Any]:
    schema = _object(
        {"type": {"const": "ping"}, "webhook_id": _id("whk"), "occurred_at": TIMESTAMP}
    )
    schema["description"] = "The body of a test ping."
    return schema


def component_schemas() -> dict[str, dict[str, Any]]:
    schemas = {schema_name(event): event_schema(event) for event in Event}
    schemas["WebhookTestPing"] = ping_schema()
    return schemas


def _operation(name: str, schema: str, headers: dict[str, str], summary: str) -> dict[str, Any]:
    return {
        "post": {
            "operationId": "webhook_" + name.replace(".", "_"),
            "summary": summary,
            "tags": ["webhook deliveries"],
            "parameters": [
                {
                    "name": header,
                    "in": "header",
                    "required": True,
                    "schema": {"type": "string"},
                    "description": description,
                }
                for header, description in headers.items()
            ],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}
                },
            },
            "responses": {
                "2XX": {"description": "Received. Any other answer (or none in 10 s) is retried."}
            },
        }
    }


def webhooks_section() -> dict[str, Any]:
    section = {
        event.value: _operation(
            event.value,
            schema_name(event),
            {**HEADERS, **EVENT_HEADERS},
            f"`{event.value}` delivered to a subscribed webhook",
        )
        for event in Event
    }
    section["ping"] = _operation(
        "ping", "WebhookTestPing", HEADERS, "Test ping (POST /webhooks/{id}/test); never retried"
    )
    return section


def add_webhooks(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular postprocessing hook."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(component_schemas())
    result["webhooks"] = webhooks_section()
    return result
