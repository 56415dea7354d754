"""Writes to servers: creation and every change of state, through the lifecycle table."""

import contextlib
import logging
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum

from django.db import transaction
from django.utils import timezone
from django_q.tasks import async_task

from accounts.models import Organization
from audit.actors import Actor
from audit.services import PanelAction
from gshost import handoff
from gshost.errors import DomainError
from gshost.withdrawals import withdraw_access
from gshost_agent.protocol import COMMAND_LIMIT
from servers import events
from servers.crash_restarts import AUTOMATIC_CAUSE, RESTART_DELAY, restart_due
from servers.errors import (
    InvalidCommand,
    InvalidState,
    NodeRefused,
    NodeUnavailable,
    ServerNotFound,
)
from servers.fleet.moves import format_address
from servers.fleet.nodes import allocate_port, node_require_reachable
from servers.fleet.placement import Plan, place, resize_refusal
from servers.game.registry import default_game, template
from servers.lifecycle import REQUESTS, CrashDetails, Move, Trigger, move
from servers.models import (
    ConsoleCommand,
    Node,
    Server,
    ServerState,
    ServerTransition,
)
from servers.runtime import get_runtime, host_traits
from servers.selectors import server_busy_job
from servers.suspension import refuse_if_suspended
from webhooks.events import Event

logger = logging.getLogger(__name__)

MAX_COMMAND_LENGTH = COMMAND_LIMIT  # the protocol's: what an agent takes


class PowerAction(StrEnum):
    START = "start"
    STOP = "stop"
    RESTART = "restart"


def server_create(
    *,
    organization: Organization,
    name: str,
    game: str | None = None,
    address: str = "",
    node: Node | None = None,
    plan: Plan | None = None,
    tags: Sequence[str] = (),
    restart_on_crash: bool = True,
    backups_limit: int | None = None,
    actor: Actor,
) -> Server:
    """A new server of the organization with its plan; it starts `stopped`; `actor` audits it.
    It keeps `backups_limit` backups (None: every one; servers.backups.jobs).

    Without `node`, on the node the placement rule picks (`servers.fleet.placement`): online, not
    drained, with the `tags`, offering the game, with a free port and room for the plan.
    Without `game`, the node's default game. A server on an agent node takes a free port of
    the node's range and the node's address. UnknownGame when no node offers the game;
    NoNodeFits, GameNotOnNode or NodeFull when no node (or not `node`) takes it.
    """
    plan = plan or Plan()

    def build(chosen: Node) -> Server:
        server = Server(
            organization=organization,
            name=name,
            game=game or default_game(chosen),
            node=chosen,
            restart_on_crash=restart_on_crash,
            backups_limit=backups_limit,
            **plan.fields(),
        )
        if host_traits(chosen).forwards_ports:
            server.port = allocate_port(chosen)
            server.address = format_address(chosen.address, server.port)
        else:
            server.address = address or _default_address(server.id)
        server.save(force_insert=True)
        return server

    with transaction.atomic():
        server = place(game=game, plan=plan, tags=tags, node=node, build=build)
        actor.audit(
            organization_id=organization.id, action=PanelAction.SERVER_CREATE, server_id=server.id
        )
        return server


def _default_address(server_id: str) -> str:
    """A plausible public address in the documentation range, stable per server."""
    seed = sum(server_id.encode())
    return f"203.0.113.{seed % 250 + 1}:{25565 + seed % 100}"


def server_transition(
    *,
    server_id: str,
    trigger: Trigger,
    cause: str,
    exit_code: int | None = None,
    crash: CrashDetails | None = None,
) -> Server:
    """Apply one move of the state machine by compare-and-set, record it, publish its event.

    Refused with 409 invalid_state when the server's current state does not allow `trigger`,
    including when another process changed the state first.
    """
    with transaction.atomic():
        server = Server.objects.get(id=server_id)
        step = move(server.state, trigger)
        if step is None:
            raise InvalidState(server.state, _refusal(trigger, server.state))
        now = timezone.now()
        due = restart_due(server, trigger, now, crash)
        changed = Server.objects.filter(id=server.id, state=server.state).update(
            state=step.target, state_changed_at=now, updated_at=now, restart_due_at=due
        )
        if changed != 1:
            current = Server.objects.get(id=server_id).state
            raise InvalidState(current, _refusal(trigger, current))
        server.state, server.state_changed_at, server.restart_due_at = step.target, now, due
        if due is not None:
            cause = f"{cause}; restarts automatically in {RESTART_DELAY.seconds} s"
            handoff.after_commit(async_task, "servers.tasks.crash_restart", due.isoformat())
        _record(server, step, cause, exit_code, now, crash, will_restart=due is not None)
    return server


def _record(
    server: Server,
    step: Move,
    cause: str,
    exit_code: int | None,
    now: datetime,
    crash: CrashDetails | None = None,
    will_restart: bool = False,
) -> None:
    ServerTransition.objects.create(
        server=server,
        from_state=step.source,
        to_state=step.target,
        trigger=step.trigger,
        cause=cause[:200],
        exit_code=exit_code,
        at=now,
    )
    if step.event is not None:
        data = step.event_data(exit_code, crash, will_restart)
        events.publish(server, step.event, data, occurred_at=now)


def _refusal(trigger: Trigger, state: str) -> str:
    if trigger in REQUESTS:
        return f"Cannot {trigger.value} a server that is {state}."
    return f"The server is {state}: a '{trigger.value}' report does not apply."


def server_power(*, server: Server, action: PowerAction, actor: Actor) -> Server:
    """Ask for start, stop or restart. The move is recorded and committed first, then the
    node is asked (never inside the transaction, nor holding a lock); the runtime reports the
    outcome later. A suspended server is refused (409 server_suspended), whoever asks; a node
    known to be unreachable is refused at once, with nothing recorded; a node that then does
    not take the request has that recorded (`request_not_taken`) and the refusal raised."""
    refuse_if_suspended(Server.objects.only("suspended_at").get(id=server.id))
    return power_request(server=server, action=action, actor=actor)


def power_request(*, server: Server, action: PowerAction, actor: Actor) -> Server:
    """`server_power` without the suspension rule: the platform's own stop of a suspended
    server, or of one being reinstalled or deleted (servers.desired)."""
    node_require_reachable(server)
    with transaction.atomic():
        if action == PowerAction.START:
            busy = server_busy_job(server)
            if busy is not None:
                message = f"A {busy.kind} job ({busy.id}) must finish before the server starts."
                raise InvalidState(server.state, message)
            pending = Server.objects.filter(id=server.id, reinstall_requested_at__isnull=False)
            if pending.exists():
                message = "The server is to be reinstalled: it starts again once that is done."
                raise InvalidState(server.state, message)
        server = server_transition(
            server_id=server.id, trigger=Trigger(action.value), cause=actor.describe()
        )
        actor.audit(
            organization_id=server.organization_id,
            action=PanelAction.SERVER_POWER,
            server_id=server.id,
        )
    runtime = get_runtime(server)
    ask = {"start": runtime.start, "stop": runtime.stop, "restart": runtime.restart}[action]
    try:
        ask(server)
    except (NodeUnavailable, NodeRefused) as failed:
        request_not_taken(server=server, trigger=Trigger(action.value), why=failed.message)
        if isinstance(failed, NodeRefused):  # told with the state the refusal left it in
            server.refresh_from_db(fields=["state"])
            raise type(failed)(server.state, failed.message) from None
        raise
    return server


NOT_TAKEN = {
    Trigger.START: Trigger.FAILED_TO_START,  # server.crashed, reason failed_to_start
    Trigger.STOP: Trigger.NOT_TAKEN,
    Trigger.RESTART: Trigger.NOT_TAKEN,
}


def request_not_taken(*, server: Server, trigger: Trigger, why: str) -> None:
    """The node did not take a request already recorded: a start becomes a failed start,
    a stop or restart leaves the server running as it was. Nothing when a report moved the
    server meanwhile."""
    cause = f"the node did not take the {trigger.value}: {why}"
    with contextlib.suppress(InvalidState):
        server_transition(server_id=server.id, trigger=NOT_TAKEN[trigger], cause=cause)


def server_set_restart_on_crash(*, server: Server, enabled: bool, actor: Actor) -> Server:
    """Whether a crash of the server is followed by an automatic start (docs/nodes.md)."""
    with transaction.atomic():
        Server.objects.filter(id=server.id).update(
            restart_on_crash=enabled, updated_at=timezone.now()
        )
        server.restart_on_crash = enabled
        actor.audit(
            organization_id=server.organization_id,
            action=PanelAction.SERVER_UPDATE,
            server_id=server.id,
        )
    return server


AUTOMATIC = Actor.system(AUTOMATIC_CAUSE)


def crash_restarts_run_due(now: datetime) -> int:
    """Start the crashed servers whose automatic start is due; how many were started. Each
    is claimed by compare-and-set first, so any number of callers make one start."""
    due = Server.objects.filter(restart_due_at__lte=now, state=ServerState.STOPPED)
    started = 0
    for server in due.select_related("node"):
        claim = Server.objects.filter(
            id=server.id, state=ServerState.STOPPED, restart_due_at=server.restart_due_at
        )
        if claim.update(restart_due_at=None) != 1:
            continue
        try:
            server_power(server=server, action=PowerAction.START, actor=AUTOMATIC)
        except DomainError as refused:
            logger.info("Server %s not started again after its crash: %s", server.id, refused)
            continue
        started += 1
    return started


def server_kill(*, server: Server, actor: Actor) -> Server:
    """Kill a running or restarting server's game (SIGKILL), whatever its node: a crash,
    which its host reports like any other (server.crashed follows). Needs a reachable node."""
    current = Server.objects.select_related("node").get(id=server.id)
    if current.state not in (ServerState.RUNNING, ServerState.RESTARTING):
        raise InvalidState(current.state, f"Only a running game can crash; it is {current.state}.")
    node_require_reachable(current)
    logger.info("Server %s: its game is killed by %s", current.id, actor.describe())
    get_runtime(current).kill(current)
    return Server.objects.get(id=current.id)


def clean_command(command: str) -> str:
    """A console command: one line of printable text, at most MAX_COMMAND_LENGTH characters."""
    command = command.strip()
    if not command:
        raise InvalidCommand("The command is empty.")
    if len(command) > MAX_COMMAND_LENGTH:
        raise InvalidCommand(f"The command is longer than {MAX_COMMAND_LENGTH} characters.")
    if not command.isprintable():
        raise InvalidCommand("The command must be one line without control characters.")
    return command


def server_send_command(*, server: Server, command: str, actor: Actor) -> ConsoleCommand:
    """Send a command to a running server's console; fires console.command_sent."""
    sent = command_deliver(server=server, command=clean_command(command), actor=actor)
    with transaction.atomic():
        data = {
            "command": sent.command,
            "source": actor.source.value,
            "key_id": actor.key_id,
            "user": actor.user_email,
        }
        events.publish(server, Event.CONSOLE_COMMAND_SENT, data, occurred_at=sent.sent_at)
        actor.audit(
            organization_id=server.organization_id,
            action=PanelAction.SERVER_CONSOLE,
            server_id=server.id,
        )
    return sent


def is_stop_command(server: Server, command: str) -> bool:
    """The game's own stop command (its template's), which is a request to stop."""
    known = template(server.game)
    return known is not None and bool(known.stop_command) and command == known.stop_command


def command_deliver(*, server: Server, command: str, actor: Actor) -> ConsoleCommand:
    """Hand the command to the runtime (outside any transaction of ours) and keep it in the
    console log. Needs `running`, and a server that is not suspended. The game's own stop
    command is a request to stop: the server goes `stopping` first (committed), so the exit
    that follows is server.stopped."""
    current = Server.objects.select_related("node").get(id=server.id)
    refuse_if_suspended(current)
    if current.state != ServerState.RUNNING:
        raise InvalidState(current.state, "Console commands need a running server.")
    node_require_reachable(current)
    stopping = is_stop_command(current, command)
    if stopping:
        server_transition(server_id=current.id, trigger=Trigger.STOP, cause="console stop")
    try:
        result = get_runtime(current).send_command(current, command)
    except DomainError as refused:
        if stopping:
            request_not_taken(server=current, trigger=Trigger.STOP, why=refused.message)
        raise
    return ConsoleCommand.objects.create(
        server=current,
        command=command,
        source=actor.source.value,
        key_id=actor.key_id or "",
        user_email=actor.user_email or "",
        sent_at=timezone.now(),
        accepted=result.accepted,
        output=result.output[:5000],
    )


# Desired state (the Application API): recorded at once, whatever the node; carried out when
# the node answers by servers.desired, from a task queued after commit and from every tick.

CONVERGE_TASK = "servers.tasks.server_converge"
SUSPENDED_REASON = "server suspended"
DELETED_REASON = "server deleted"


def _live_locked(server: Server) -> Server:
    """The server's row, locked; ServerNotFound once its deletion was asked."""
    current = Server.objects.select_for_update().filter(id=server.id).first()
    if current is None or current.deleting:
        raise ServerNotFound()
    return current


def _converge_after_commit(server: Server) -> None:
    handoff.after_commit(async_task, CONVERGE_TASK, server.id)


def server_suspend(*, server: Server, actor: Actor) -> Server:
    """Suspended now, also while its node is down: every customer action on it is refused
    (409 server_suspended), its console sockets and SFTP sessions are closed (a withdrawal),
    and server.suspended fires; its game is stopped once its node answers. Suspending a
    suspended server changes nothing and fires nothing."""
    with transaction.atomic():
        current = _live_locked(server)
        if current.suspended_at is None:
            now = timezone.now()
            Server.objects.filter(id=current.id).update(
                suspended_at=now, restart_due_at=None, updated_at=now
            )
            current.suspended_at, current.restart_due_at = now, None
            withdraw_access(reason=SUSPENDED_REASON, server_ids=[current.id])
            events.publish(current, Event.SERVER_SUSPENDED, {}, occurred_at=now)
            _converge_after_commit(current)
        actor.audit(
            organization_id=current.organization_id,
            action=PanelAction.SERVER_SUSPEND,
            server_id=current.id,
        )
    return current


def server_unsuspend(*, server: Server, actor: Actor) -> Server:
    """No longer suspended: customers may act on it again; server.unsuspended fires. Its game
    is not started. Unsuspending a server that is not suspended changes nothing."""
    with transaction.atomic():
        current = _live_locked(server)
        if current.suspended_at is not None:
            now = timezone.now()
            Server.objects.filter(id=current.id).update(suspended_at=None, updated_at=now)
            current.suspended_at = None
            events.publish(current, Event.SERVER_UNSUSPENDED, {}, occurred_at=now)
        actor.audit(
            organization_id=current.organization_id,
            action=PanelAction.SERVER_UNSUSPEND,
            server_id=current.id,
        )
    return current


def server_reinstall_request(*, server: Server, actor: Actor) -> Server:
    """A reinstall, recorded now and carried out when its node answers: the game stopped if
    it runs, then its directory emptied (its settings file written afresh); its backups are
    kept, and it stays stopped. Asked again before it is done, it is still one reinstall."""
    with transaction.atomic():
        current = _live_locked(server)
        if current.reinstall_requested_at is None:
            now = timezone.now()
            Server.objects.filter(id=current.id).update(
                reinstall_requested_at=now, restart_due_at=None, updated_at=now
            )
            current.reinstall_requested_at, current.restart_due_at = now, None
            _converge_after_commit(current)
        actor.audit(
            organization_id=current.organization_id,
            action=PanelAction.SERVER_REINSTALL,
            server_id=current.id,
        )
    return current


def server_delete_request(*, server: Server, actor: Actor) -> None:
    """A deletion, recorded now: from this moment customers find no such server (404) and
    its console and SFTP sessions are closed. Carried out when its node answers: the game
    stopped, its directory and its backups (on the node and in the bucket) removed, then its
    rows. A server already being deleted is not found (ServerNotFound)."""
    with transaction.atomic():
        current = _live_locked(server)
        now = timezone.now()
        Server.objects.filter(id=current.id).update(
            delete_requested_at=now, restart_due_at=None, updated_at=now
        )
        current.delete_requested_at = now
        withdraw_access(reason=DELETED_REASON, server_ids=[current.id])
        _converge_after_commit(current)
        actor.audit(
            organization_id=current.organization_id,
            action=PanelAction.SERVER_DELETE,
            server_id=current.id,
        )


def server_change(
    *, server: Server, name: str | None = None, plan: Plan | None = None, actor: Actor
) -> Server:
    """Rename the server and/or give it a new plan. A running game keeps the limits it was
    started with: the new ones apply at its next start. NoNodeFits when its node has no room
    for the new plan."""
    with transaction.atomic():
        current = Server.objects.select_for_update().get(id=server.id)
        if plan is not None and (refused := resize_refusal(current, plan)) is not None:
            raise refused
        fields: dict[str, object] = {} if name is None else {"name": name}
        if plan is not None:
            fields.update(plan.fields())
        changed = {key: value for key, value in fields.items() if getattr(current, key) != value}
        if changed:
            for key, value in changed.items():
                setattr(current, key, value)
            current.save(update_fields=[*changed, "updated_at"])
            actor.audit(
                organization_id=current.organization_id,
                action=PanelAction.SERVER_UPDATE,
                server_id=current.id,
            )
    return current
