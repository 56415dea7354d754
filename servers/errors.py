"""The errors server code refuses with. The API and the panel each turn them into an answer
in one place (`gshost.api.errors`, `gshost.panel_errors`)."""

from collections.abc import Sequence

from gshost.errors import (
    InvalidInput,
    NotEnabled,
    NotFound,
    NotPermitted,
    NotSupported,
    Unavailable,
)
from gshost.errors import InvalidState as InvalidStateKind


class ServerNotFound(NotFound):
    """The same for a server that is absent, in another organization, or outside the key's
    restrictions."""

    code = "server_not_found"
    default_message = "No such server."


class InvalidState(InvalidStateKind):
    def __init__(self, state: str, message: str | None = None) -> None:
        super().__init__(message or f"Not allowed while the server is {state}.", state=state)


class ServerSuspended(InvalidStateKind):
    """Every customer action on a suspended server (power, console, files, SFTP, backups,
    restores, schedules, settings) is refused until the integration that suspended it
    unsuspends it."""

    code = "server_suspended"
    default_message = "This server is suspended."


class NodeRefused(InvalidState):
    """The node's agent refused a request this side found allowed (its game does not run
    there, another job runs): a 409 to the customer, a failed schedule run."""


class DiskLimitExceeded(NodeRefused):
    """The server's files are over its plan's `disk_mb`: its node refuses to start it."""

    code = "disk_limit_exceeded"


class CapabilityNotSupported(NotSupported):
    def __init__(self, capability: str) -> None:
        message = f"This server's game does not support {capability}. See its capabilities."
        super().__init__(message, capability=capability)


class FeatureNotEnabled(NotEnabled):
    def __init__(self, capability: str) -> None:
        message = f"This server's plan does not enable {capability}. See its capabilities."
        super().__init__(message, capability=capability)


class JobNotFound(NotFound):
    default_message = "No such job."


class NotFoundOnServer(NotFound):
    """A backup, schedule, job or config event that is not on this server (another server's
    is not found either)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"No such {what} on this server.")


NODE_RETRY_AFTER_SECONDS = 30


class NodeUnavailable(Unavailable):
    """The server's node is unreachable (no heartbeat for 30 s) or its agent did not answer:
    nothing was done, nothing is queued."""

    code = "node_unavailable"

    def __init__(self, node_name: str, why: str = "") -> None:
        message = f"The server's node {node_name} is unavailable{f' ({why})' if why else ''}. "
        message += "Nothing was done; try again later."
        super().__init__(message, retry_after=NODE_RETRY_AFTER_SECONDS)


class NodeAnswerLate(NodeUnavailable):
    """The request reached the node (or may have), which did not answer within the deadline:
    it may carry it out. Its report, or the worker's check of what it runs, settles it."""

    def __init__(self, node_name: str) -> None:
        Unavailable.__init__(
            self,
            f"The server's node {node_name} did not answer in time. It may still carry out "
            "the request: the server's state will tell.",
            retry_after=NODE_RETRY_AFTER_SECONDS,
        )


class NotOnAgentNodes(NotSupported):
    """Something only the simulated node can do (fail-start, a move to a new address)."""

    code = "not_supported"


class MigrationRefused(InvalidStateKind):
    """A move between agent nodes that cannot begin: the target is not another online agent
    node with the game and a free port, or the server is not on an agent node."""

    code = "migration_refused"


class UnknownGame(InvalidInput):
    """No node offers the game (the games are the nodes' templates)."""

    def __init__(self, game: str, games: Sequence[str]) -> None:
        offered = ", ".join(games) or "none"
        super().__init__(f"No node offers the game {game!r}; the nodes offer: {offered}.")


class GameNotOnNode(NotSupported):
    def __init__(self, node_name: str, game: str, games: Sequence[str]) -> None:
        runs = ", ".join(games) or "none"
        super().__init__(f"Node {node_name!r} does not run {game!r}; it runs: {runs}.")


class NodeFull(InvalidStateKind):
    """Every port of the node's range is taken by a server."""

    def __init__(self, node_name: str, first_port: int, last_port: int) -> None:
        super().__init__(
            f"Node {node_name!r} has no free port: {first_port}-{last_port} are all taken."
        )


class NoNodeFits(InvalidStateKind):
    """No node takes a new server (or not the one named): the message names what is short
    (memory, disk, ports) and where, or that no node offers the game."""

    code = "no_node_fits"


class InvalidPlan(InvalidInput):
    """A plan's value out of its bounds."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message, fields={field: [message]})


class InvalidAddress(InvalidInput):
    """A server address that is not IP:PORT, or the one it already has."""


class InvalidNodeInput(InvalidInput):
    """A node's name, URL, address, ports or CA certificate that cannot be used."""


class SimulatedNodeHasNoToken(NotSupported):
    default_message = "The simulated node has no token."


class NotAMaintenanceAction(InvalidInput):
    """A job kind other than wipe or reinstall asked as maintenance."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"Not a maintenance action: {kind}.", fields={"action": ["Not valid."]})


class InvalidCommand(InvalidInput):
    """A console command that is empty, too long, or not one line of printable text."""


class InvalidSchedule(InvalidInput):
    """A schedule's name, cron expression, alerts or command that cannot be used."""


class InvalidSetting(InvalidInput):
    """A game setting this game does not have, or a value it does not accept."""


class InvalidConfigEvent(InvalidInput):
    """A config event without a name or changes, or reverting before it applies."""


class ServerNotOnNode(NotPermitted):
    """A node's report (to the node API, not the Customer API) about a server elsewhere."""

    code = "server_not_on_node"
    default_message = "The report names a server that is not on this node."


class JobNotOnNode(ServerNotOnNode):
    code = "job_not_on_node"
    default_message = "The report names a job that is not of this server."


class NodeTokenChanged(NotPermitted):
    """The token the node was known by is no longer its own (rotated since, or the node is
    gone): nothing was written. The caller may have found the node in a cache."""


class InvalidNodeRequest(InvalidInput):
    """A body an agent sent to a node route that is not what the route takes; `fields` names
    the field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, fields={field: [message]})
        self.field = field


class AgentError(InvalidStateKind):
    """The agent answered with an error status (`status`), its own `agent_code` and `message`
    (either may be empty: callers say what the node refused)."""

    def __init__(self, status: int, agent_code: str, message: str) -> None:
        super().__init__(message or f"The agent answered {status}.")
        self.status, self.agent_code, self.message = status, agent_code, message


class MigrationFailed(InvalidStateKind):
    """A step of a move between agent nodes failed: why, in a sentence."""


class ObjectStorageError(Unavailable):
    """The bucket refused or did not answer: what failed, in a sentence."""


class UploadNotOpen(NotFound):
    """No upload of that backup is under way for this node: no URL is given."""

    default_message = "No upload of that backup is under way on this node."


class SftpLoginRefused(NotPermitted):
    """An SFTP login the control plane refuses: wrong credentials, no membership or
    `files:sftp`, or a server of another node. One answer for all, so the node learns only
    that it was refused (the reason is logged here)."""

    code = "sftp_login_refused"
    default_message = "The SFTP login is refused."


class LiveConsoleNotSupported(NotSupported):
    """A server of the simulated node: its console is the mirror only, no websocket."""

    def __init__(self) -> None:
        message = "This server's node has no live console; read GET /servers/{id} instead."
        super().__init__(message, capability="console")


class ConsoleTokenRefused(NotPermitted):
    """A console token a node passed on (a `send command` over a socket) that is not valid
    here: bad signature, expired, for another node or server, or its key or person no longer
    holds access. The node tells the socket `access_withdrawn`-style errors by this code."""

    code = "token_refused"
    default_message = "The console token is not valid, or its access was withdrawn."
