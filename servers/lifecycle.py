"""The server state machine as one table, and nothing else: no I/O, no clock.

A move is (state, trigger) -> (next state, event or None). Requests from customers are
start/stop/restart; everything else is a report from the host (the runtime). Only moves that
reach `running` or `stopped` fire an event: starting, stopping and restarting never do.
"""

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gshost_agent.protocol import last_output
from servers.models import ServerState
from webhooks.events import Event


class Trigger(StrEnum):
    START = "start"
    STOP = "stop"
    RESTART = "restart"
    READY = "ready"  # the host reports the game is up
    HALTED = "halted"  # the host reports a requested stop has finished
    FAILED_TO_START = "failed_to_start"  # the host gave up starting the game
    CRASH = "crash"  # the game exited without being asked to
    NODE_STOP = "node_stop"  # the node stops the game on its own (agent shutting down, restore)
    NODE_START = "node_start"  # the node starts it again on its own (after a restore)
    # The node did not take a stop or restart (it refused, or could not be reached): the
    # server is back where it was. A start it did not take is FAILED_TO_START.
    NOT_TAKEN = "not_taken"


REQUESTS: frozenset[Trigger] = frozenset({Trigger.START, Trigger.STOP, Trigger.RESTART})
TRANSITIONAL: frozenset[ServerState] = frozenset(
    {ServerState.STARTING, ServerState.STOPPING, ServerState.RESTARTING}
)

S = ServerState
TABLE: dict[tuple[ServerState, Trigger], tuple[ServerState, Event | None]] = {
    (S.STOPPED, Trigger.START): (S.STARTING, None),
    (S.STARTING, Trigger.READY): (S.RUNNING, Event.SERVER_STARTED),
    (S.STARTING, Trigger.FAILED_TO_START): (S.STOPPED, Event.SERVER_CRASHED),
    (S.RUNNING, Trigger.STOP): (S.STOPPING, None),
    (S.STOPPING, Trigger.HALTED): (S.STOPPED, Event.SERVER_STOPPED),
    (S.RUNNING, Trigger.RESTART): (S.RESTARTING, None),
    (S.RESTARTING, Trigger.READY): (S.RUNNING, Event.SERVER_RESTARTED),
    (S.RUNNING, Trigger.CRASH): (S.STOPPED, Event.SERVER_CRASHED),
    (S.RESTARTING, Trigger.CRASH): (S.STOPPED, Event.SERVER_CRASHED),
    (S.RUNNING, Trigger.NODE_STOP): (S.STOPPING, None),
    (S.STARTING, Trigger.NODE_STOP): (S.STOPPING, None),
    (S.RESTARTING, Trigger.NODE_STOP): (S.STOPPING, None),
    (S.STOPPED, Trigger.NODE_START): (S.STARTING, None),
    (S.STOPPING, Trigger.NOT_TAKEN): (S.RUNNING, None),
    (S.RESTARTING, Trigger.NOT_TAKEN): (S.RUNNING, None),
}


@dataclass(frozen=True)
class CrashDetails:
    """What an agent node tells about a game that exited: the signal that ended it, whether
    the kernel killed it for memory, its last console lines."""

    signal: int | None = None
    oom: bool = False
    last_output: tuple[str, ...] = ()
    # Why it ended, where the node says: "exited", or "disk_limit" (the node stopped it for
    # going over the plan's disk).
    reason: str = "exited"

    def data(self) -> dict[str, Any]:
        return {
            "signal": self.signal,
            "oom": self.oom,
            "last_output": last_output(list(self.last_output)),
        }


@dataclass(frozen=True)
class Move:
    source: ServerState
    trigger: Trigger
    target: ServerState
    event: Event | None

    def event_data(
        self,
        exit_code: int | None = None,
        crash: CrashDetails | None = None,
        will_restart: bool = False,
    ) -> dict[str, Any]:
        """The event's `data` (its payload schema); empty when the move fires nothing. A
        crash says whether the server is started again by itself (`will_restart`); one
        reported by an agent node adds `signal`, `oom` and `last_output`."""
        if self.event in (Event.SERVER_STARTED, Event.SERVER_STOPPED):
            return {"previous_state": self.source.value}
        if self.event == Event.SERVER_CRASHED:
            failed = self.trigger == Trigger.FAILED_TO_START
            ended = crash.reason if crash is not None else "exited"
            data: dict[str, Any] = {
                "reason": "failed_to_start" if failed else ended,
                "exit_code": exit_code,
            }
            data = data if crash is None else {**data, **crash.data()}
            return {**data, "will_restart": will_restart}
        return {}


def move(state: str, trigger: Trigger) -> Move | None:
    """The move `trigger` makes from `state`, or None when it is not allowed there."""
    source = ServerState(state)
    found = TABLE.get((source, trigger))
    if found is None:
        return None
    target, event = found
    return Move(source, trigger, target, event)


def allowed_triggers(state: str) -> frozenset[Trigger]:
    return frozenset(trigger for source, trigger in TABLE if source == state)
