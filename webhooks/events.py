"""The events a webhook may subscribe to. Subscribing to any other name is refused at
registration."""

from enum import StrEnum


class Event(StrEnum):
    SERVER_STARTED = "server.started"
    SERVER_STOPPED = "server.stopped"
    SERVER_RESTARTED = "server.restarted"
    SERVER_CRASHED = "server.crashed"
    CONSOLE_COMMAND_SENT = "console.command_sent"
    COMMAND_SCHEDULE_EXECUTED = "command_schedule.executed"
    COMMAND_SCHEDULE_ALERT = "command_schedule.alert"
    SERVER_MIGRATED = "server.migrated"
    SERVER_SUSPENDED = "server.suspended"
    SERVER_UNSUSPENDED = "server.unsuspended"


EVENT_NAMES: frozenset[str] = frozenset(event.value for event in Event)
