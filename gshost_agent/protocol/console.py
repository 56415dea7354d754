"""A server's console output as the agent keeps it (`GET /v1/servers/{id}/console?after=N`,
answered to the control plane): the lines after line N, and the number of the last line. And
the console websocket's path on a node, its command route, and its tokens' subjects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gshost_agent.protocol import fields
from gshost_agent.protocol.names import ProtocolError

MAX_LINE_NUMBER = 2**62
MAX_LINES_IN_ANSWER = 1000


@dataclass(frozen=True)
class OutputLine:
    """One console line, numbered; `daemon` marks a line of the node's own, not the game's."""

    n: int
    text: str
    daemon: bool = False

    def to_json(self) -> dict[str, Any]:
        line: dict[str, Any] = {"n": self.n, "text": self.text}
        return line | {"daemon": True} if self.daemon else line

    @classmethod
    def from_json(cls, value: Any) -> OutputLine:
        value = fields.obj(value, "lines", "an object of n and text")
        text = value.get("text")
        if not isinstance(text, str):
            raise ProtocolError("lines", "a line's text is a string.")
        return cls(
            n=fields.integer(value.get("n"), "lines", 1, MAX_LINE_NUMBER),
            text=text,
            daemon=fields.boolean(value, "daemon", False),
        )


@dataclass(frozen=True)
class ConsoleOutput:
    lines: tuple[OutputLine, ...]
    last: int

    def to_json(self) -> dict[str, Any]:
        return {"lines": [line.to_json() for line in self.lines], "last": self.last}

    @classmethod
    def from_json(cls, body: Any) -> ConsoleOutput:
        body = fields.obj(body, "body", "a JSON object")
        lines = body.get("lines")
        if not isinstance(lines, list) or len(lines) > MAX_LINES_IN_ANSWER:
            raise ProtocolError("lines", f"lines is a list of at most {MAX_LINES_IN_ANSWER} lines.")
        return cls(
            lines=tuple(OutputLine.from_json(line) for line in lines),
            last=fields.integer(body.get("last"), "last", 0, MAX_LINE_NUMBER),
        )


# The console websocket (docs/console.md): where it is on a node, and whom a token is for.
CONSOLE_SOCKET_PATH = "/api/v1/servers/{server_id}/console"
# The node route the agent asks before a `send command` over a socket reaches the game.
CONSOLE_COMMAND_ROUTE = "/internal/nodes/console-commands"
KEY_SUBJECT = "key:"
PERSON_SUBJECT = "person:"


def console_subject(*, key_id: str | None = None, person_id: int | str | None = None) -> str:
    """A console token's `sub`: `key:<key id>` or `person:<user id>`."""
    if key_id is not None:
        return KEY_SUBJECT + key_id
    if person_id is None:
        raise ValueError("a console token is for a key or a person")
    return PERSON_SUBJECT + str(person_id)


def subject_parts(subject: str) -> tuple[str | None, str | None]:
    """(key id, person id) of a console token's `sub`; (None, None) for anything else."""
    for prefix, is_key in ((KEY_SUBJECT, True), (PERSON_SUBJECT, False)):
        if subject.startswith(prefix) and 0 < len(subject) - len(prefix) <= 64:
            rest = subject[len(prefix) :]
            return (rest, None) if is_key else (None, rest)
    return None, None
