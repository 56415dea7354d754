"""Crash restarts: a game that crashes while it runs (not a failed start) is started again
RESTART_DELAY later, unless the server's `restart_on_crash` is off, it crashed within
CRASH_LOOP_WINDOW of its last start (a crash loop), its node is unreachable, its node
stopped it for going over its disk (`disk_limit`), or it is suspended, to be reinstalled or
deleted (servers.desired); then it stays stopped. server.crashed
says which (`will_restart`); the start it gets is an ordinary one
(server.started), which the state history calls automatic (`AUTOMATIC_CAUSE`).

The decision is recorded with the crash (`Server.restart_due_at`, in the crash's own
compare-and-set); `servers.services.crash_restarts_run_due` starts what is due, from a task
queued after the crash commits and from every tick, claiming each server by compare-and-set
so that one start is made whoever runs it.
"""

from datetime import datetime, timedelta

from servers.lifecycle import CrashDetails, Trigger
from servers.models import NodeState, Server, ServerState, ServerTransition

RESTART_DELAY = timedelta(seconds=5)
CRASH_LOOP_WINDOW = timedelta(seconds=60)
AUTOMATIC_CAUSE = "automatic restart after a crash"
DISK_LIMIT = "disk_limit"  # a crash's reason: the node stopped it for its disk use


def crash_loop(last_start: datetime | None, crashed_at: datetime) -> bool:
    return last_start is not None and crashed_at - last_start < CRASH_LOOP_WINDOW


def last_start(server: Server) -> datetime | None:
    """When the server was last asked to start (a start, a restart, or an automatic one)."""
    starts = ServerTransition.objects.filter(
        server=server, to_state__in=(ServerState.STARTING, ServerState.RESTARTING)
    )
    return starts.order_by("-at", "-id").values_list("at", flat=True).first()


def restart_due(
    server: Server, trigger: Trigger, crashed_at: datetime, crash: CrashDetails | None = None
) -> datetime | None:
    """When the crash this `trigger` reports is followed by an automatic start; None when
    it is not (a failed start, the setting off, over its disk limit, a crash loop, an
    unreachable node, a server suspended, to be reinstalled or deleted)."""
    if trigger != Trigger.CRASH or not server.restart_on_crash:
        return None
    if server.suspended or server.reinstall_requested_at or server.deleting:
        return None  # what was asked of it wants the game stopped
    if crash is not None and crash.reason == DISK_LIMIT:
        return None
    if server.node.state(crashed_at) != NodeState.ONLINE:
        return None
    if crash_loop(last_start(server), crashed_at):
        return None
    return crashed_at + RESTART_DELAY
