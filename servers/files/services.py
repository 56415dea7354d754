"""What a customer does with a server's files, from the API or the panel.

Each service checks the server may be touched (a suspended server refuses every one), the path
(400 invalid_path, by the protocol's rule the agent applies too), then calls the node: there is
nothing of ours to write first, so no call is made inside a transaction. A change made from the
panel is audited afterwards with its paths; API calls are audited by the API's middleware
(the view notes the paths)."""

from base64 import urlsafe_b64decode, urlsafe_b64encode
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from audit.actors import Actor
from audit.services import PanelAction
from gshost.errors import InvalidInput
from gshost_agent.protocol import InvalidFilePath, file_path, parse_time
from servers.files.agent import files_call, files_json
from servers.files.errors import PathInvalid
from servers.fleet.nodes import node_require_reachable
from servers.models import Server
from servers.suspension import refuse_if_suspended

LIST_DEFAULT, LIST_MOST = 200, 1000


@dataclass(frozen=True)
class Listing:
    path: str
    results: list[dict[str, Any]]
    cursor: str | None  # of the next page, None on the last


@dataclass(frozen=True)
class FileLink:
    url: str
    expires_at: datetime


def clean_path(path: object, field: str = "path") -> str:
    """The customer's path normalized, or PathInvalid."""
    if not isinstance(path, str) or not path:
        raise InvalidInput(f"{field}: a path is required.", fields={field: ["A path is required."]})
    try:
        return file_path(path)
    except InvalidFilePath as error:
        raise PathInvalid(f"{field}: {error}.", field=field) from None


def _ready(server: Server) -> None:
    refuse_if_suspended(server)
    node_require_reachable(server)


def _audit(actor: Actor, server: Server, action: PanelAction, details: dict[str, Any]) -> None:
    with transaction.atomic():
        actor.audit(
            organization_id=server.organization_id,
            action=action,
            server_id=server.id,
            details=details,
        )


def files_list(*, server: Server, path: str, limit: int, cursor: str | None) -> Listing:
    _ready(server)
    params = {"path": path, "limit": str(limit)}
    if cursor:
        params["after"] = _after_of(cursor)
    answer = files_json(server, "GET", params=params)
    after = answer.get("after")
    return Listing(
        path=str(answer.get("path", path)),
        results=list(answer.get("results", [])),
        cursor=urlsafe_b64encode(after.encode()).decode() if isinstance(after, str) else None,
    )


def _after_of(cursor: str) -> str:
    """The name a page starts after. Any base64url is a position among the names, even one that
    is not UTF-8 (its bytes are read as text, replacement characters and all)."""
    try:
        return urlsafe_b64decode(cursor.encode("ascii")).decode(errors="replace")
    except (ValueError, UnicodeError):
        raise InvalidInput("cursor: not a cursor of this listing.") from None


def files_read(*, server: Server, path: str) -> bytes:
    _ready(server)
    return files_call(server, "GET", "content", params={"path": path})


def files_write(*, server: Server, path: str, content: bytes, actor: Actor) -> dict[str, Any]:
    _ready(server)
    written = files_json(server, "PUT", "content", params={"path": path}, data=content)
    _audit(actor, server, PanelAction.FILES_WRITE, {"path": path, "size": len(content)})
    return written


def files_rename(*, server: Server, source: str, target: str, actor: Actor) -> dict[str, Any]:
    _ready(server)
    moved = files_json(server, "POST", "rename", body={"from": source, "to": target})
    _audit(actor, server, PanelAction.FILES_RENAME, {"from": source, "to": target})
    return moved


def files_copy(*, server: Server, path: str, actor: Actor) -> dict[str, Any]:
    _ready(server)
    made = files_json(server, "POST", "copy", body={"path": path}, long=True)
    _audit(actor, server, PanelAction.FILES_COPY, {"path": path})
    return made


def files_make_directory(*, server: Server, path: str, actor: Actor) -> dict[str, Any]:
    _ready(server)
    made = files_json(server, "POST", "directory", body={"path": path})
    _audit(actor, server, PanelAction.FILES_DIRECTORY, {"path": path})
    return made


def files_delete(*, server: Server, paths: list[str], actor: Actor) -> dict[str, Any]:
    _ready(server)
    deleted = files_json(server, "POST", "delete", body={"paths": paths}, long=True)
    _audit(actor, server, PanelAction.FILES_DELETE, {"paths": paths})
    return deleted


def files_compress(
    *, server: Server, paths: list[str], archive: str, actor: Actor
) -> dict[str, Any]:
    _ready(server)
    body = {"paths": paths, "archive": archive}
    made = files_json(server, "POST", "compress", body=body, long=True)
    _audit(actor, server, PanelAction.FILES_COMPRESS, body)
    return made


def files_decompress(
    *, server: Server, archive: str, directory: str, actor: Actor
) -> dict[str, Any]:
    _ready(server)
    body = {"archive": archive, "directory": directory}
    done = files_json(server, "POST", "decompress", body=body, long=True)
    _audit(actor, server, PanelAction.FILES_DECOMPRESS, body)
    return done


def files_pull(*, server: Server, url: str, path: str, actor: Actor) -> dict[str, Any]:
    _ready(server)
    done = files_json(server, "POST", "pull", body={"url": url, "path": path}, long=True)
    _audit(actor, server, PanelAction.FILES_PULL, {"url": url, "path": path})
    return done


def files_download_link(*, server: Server, path: str, actor: Actor) -> FileLink:
    _ready(server)
    link = _link(server, files_json(server, "POST", "download-link", body={"path": path}))
    _audit(actor, server, PanelAction.FILES_DOWNLOAD, {"path": path})
    return link


def files_upload_link(*, server: Server, directory: str, actor: Actor) -> FileLink:
    _ready(server)
    body = {"directory": directory}
    link = _link(server, files_json(server, "POST", "upload-link", body=body))
    _audit(actor, server, PanelAction.FILES_UPLOAD, body)
    return link


def _link(server: Server, answer: dict[str, Any]) -> FileLink:
    expires = parse_time(answer.get("expires_at")) or 0.0
    return FileLink(
        url=server.node.url.rstrip("/") + str(answer.get("path", "")),
        expires_at=datetime.fromtimestamp(expires, UTC),
    )
