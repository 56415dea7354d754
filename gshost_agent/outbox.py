"""Reports wait here (`<data>/outbox/`) until the control plane acknowledges them.

Each report gets the next sequence number of this outbox and is on disk (a temporary file,
fsync, rename) before anyone tries to send it, so a report survives the agent being killed and
the control plane being down; `deliver_forever` sends them in order, one a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from gshost_agent.keeper import write_json_atomically
from gshost_agent.protocol import Report

logger = logging.getLogger("gshost_agent.outbox")

FIRST_RETRY_SECONDS = 0.5
LAST_RETRY_SECONDS = 5.0
STATE = "state.json"


class Outbox:
    """`<seq>.json` files hold `{"report": <the body sent>, "exit_key": ...}`; `state.json`
    holds the last sequence number used and, per server, the exit last reported (so an agent
    killed between reporting an exit and noting it does not report it twice)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.outbox_id = self._outbox_id()
        self.last_seq, self.exits = self._state()
        self.changed = asyncio.Event()

    def _outbox_id(self) -> str:
        path = self.directory / "outbox.json"
        with contextlib.suppress(OSError, ValueError, KeyError):
            return str(json.loads(path.read_text())["outbox_id"])
        outbox_id = "obx_" + secrets.token_hex(12)
        write_json_atomically(path, {"outbox_id": outbox_id})
        return outbox_id

    def _state(self) -> tuple[int, dict[str, str]]:
        last_seq, exits = 0, {}
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            state = json.loads((self.directory / STATE).read_text())
            last_seq, exits = int(state["last_seq"]), dict(state["exits"])
        # A report written just before the agent died, its state not yet: its file says it.
        for seq, path in self.pending():
            if seq > last_seq:
                last_seq = seq
                with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                    entry = json.loads(path.read_text())
                    if entry["exit_key"]:
                        exits[entry["report"]["server_id"]] = entry["exit_key"]
        return last_seq, exits

    def add(self, report: Report, *, exit_key: str | None = None) -> int:
        """Keeps `report` durably under the next sequence number, which it returns. `exit_key`
        names the exit it reports (see `exit_reported`)."""
        seq = self.last_seq + 1
        body = replace(report, outbox_id=self.outbox_id, seq=seq).to_json()
        entry = {"report": body, "exit_key": exit_key}
        write_json_atomically(self.directory / f"{seq:012d}.json", entry)
        if exit_key:
            self.exits[report.server_id] = exit_key
        # The counter outlives the reports: a sequence number is never used twice.
        write_json_atomically(self.directory / STATE, {"last_seq": seq, "exits": self.exits})
        self.last_seq = seq
        self.changed.set()
        return seq

    def exit_reported(self, server_id: str, exit_key: str) -> bool:
        return self.exits.get(server_id) == exit_key

    def pending(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.directory.glob("[0-9]*.json"):
            with contextlib.suppress(ValueError):
                found.append((int(path.stem), path))
        return sorted(found)

    def remove(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


class Sender(Protocol):
    async def post_report(self, body: dict[str, Any]) -> int:
        """The HTTP status of the answer; raises OSError (or aiohttp's) when none came."""
        ...


async def deliver_forever(outbox: Outbox, sender: Sender) -> None:
    delay = FIRST_RETRY_SECONDS
    while True:
        pending = outbox.pending()
        if not pending:
            outbox.changed.clear()
            await outbox.changed.wait()
            continue
        seq, path = pending[0]
        if await deliver_one(outbox, sender, seq, path):
            delay = FIRST_RETRY_SECONDS
        else:
            await asyncio.sleep(delay)
            delay = min(delay * 2, LAST_RETRY_SECONDS)


async def deliver_one(outbox: Outbox, sender: Sender, seq: int, path: Path) -> bool:
    """Whether the report is done with (acknowledged, or refused for good)."""
    try:
        body = json.loads(path.read_text())["report"]
    except (OSError, ValueError, KeyError, TypeError):
        logger.error("report %s is unreadable; dropped", seq)
        outbox.remove(path)
        return True
    try:
        status = await sender.post_report(body)
    except Exception as error:  # any failure to get an answer: try again later
        logger.warning("report %s not delivered (%s); will retry", seq, type(error).__name__)
        return False
    if status == 200:
        outbox.remove(path)
        return True
    if status in (400, 403):
        logger.error("report %s (%s) refused with %s; dropped", seq, body.get("kind"), status)
        outbox.remove(path)
        return True
    logger.warning("report %s answered %s; will retry", seq, status)
    return False


async def flush(outbox: Outbox, sender: Sender, timeout: float) -> None:
    """Sends what it can within `timeout` (the agent is ending)."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(_send_all_once(outbox, sender), timeout)


async def _send_all_once(outbox: Outbox, sender: Sender) -> None:
    for seq, path in outbox.pending():
        if not await deliver_one(outbox, sender, seq, path):
            return
