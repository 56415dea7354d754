"""The file manager: a server's files in the panel (browse, view and edit text, upload and
download through the node's single-use links, rename, delete, new folder, compress,
decompress) and the SFTP details. Scopes as the API asks of a key: files:read to look and
download, files:write to change, files:delete to delete.

Downloads and uploads go straight to the node: a download is a redirect to a fresh link; an
upload asks the panel for a link (`files_upload_link_page`, JSON) and the page's script posts
the files to it, so the page's Content-Security-Policy lets it connect to that node."""

from typing import Any
from urllib.parse import urlencode, urlsplit

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.models import Membership
from accounts.scopes import Scope
from gshost.errors import DomainError
from gshost.panel_errors import refusal_message
from servers.files.services import (
    clean_path,
    files_compress,
    files_decompress,
    files_delete,
    files_download_link,
    files_list,
    files_make_directory,
    files_read,
    files_rename,
    files_upload_link,
    files_write,
)
from servers.models import Server
from servers.panel.access import person, refused, server_page
from servers.panel.sftp import sftp_details
from servers.panel.views import server_context

EDIT_LIMIT = 1024 * 1024  # a panel form holds at most 1 MiB: larger files are downloaded
PAGE_SIZE = 500
SFTP_PORT = 2022
ARCHIVES = (".tar.gz", ".tgz", ".tar", ".zip")


def _path(request: HttpRequest, name: str = "path") -> str:
    given = request.GET.get(name) if request.method == "GET" else request.POST.get(name)
    return clean_path(given or "/", name)


def back_to_folder(server: Server, folder: str) -> HttpResponse:
    url = reverse("servers_panel:files", kwargs={"server_id": server.id})
    return redirect(f"{url}?{urlencode({'path': folder})}")


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _join(folder: str, name: str) -> str:
    return clean_path(f"{folder.rstrip('/')}/{name}", "name")


@require_GET
@server_page(Scope.FILES_READ)
def files_page(request: HttpRequest, membership: Membership, server: Server) -> HttpResponse:
    context = server_context(server, membership, "files")
    try:
        folder = _path(request)
        listing = files_list(server=server, path=folder, limit=PAGE_SIZE,
                             cursor=request.GET.get("cursor"))  # fmt: skip
    except DomainError as refusal:
        context["error"] = refusal_message(refusal)
        return render(request, "servers/files.html", context, status=200)
    crumbs, walked = [], ""
    for part in [p for p in folder.split("/") if p]:
        walked += f"/{part}"
        crumbs.append({"name": part, "path": walked})
    for entry in listing.results:
        entry["archive"] = entry["type"] == "file" and entry["name"].lower().endswith(ARCHIVES)
        entry["editable"] = entry["type"] == "file" and entry["size"] <= EDIT_LIMIT
    held = membership.held_scopes
    context.update(
        folder=folder,
        parent=_parent(folder),
        crumbs=crumbs,
        entries=listing.results,
        next_cursor=listing.cursor,
        may_write=Scope.FILES_WRITE in held,
        may_delete=Scope.FILES_DELETE in held,
        sftp=_sftp_details(server, membership),
    )
    response = render(request, "servers/files.html", context)
    origin = _origin(server.node.url)
    if origin:  # the upload script posts to the node's link
        response._csp_update = {"connect-src": [origin]}  # type: ignore[attr-defined]
    return response


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme in ("http", "https") else ""


def _sftp_details(server: Server, membership: Membership) -> dict[str, Any]:
    """As the node's heartbeat reports its SFTP (servers.panel.sftp); the default port and no
    fingerprint until it has; `off` when its heartbeats say it serves none."""
    reported = sftp_details(server, membership)
    if reported is None and server.node.last_heartbeat_at is not None:
        return {"off": True}
    host = reported.host if reported else urlsplit(server.node.url).hostname or server.node.address
    port = reported.port if reported else SFTP_PORT
    return {
        "address": f"sftp://{host}:{port}",
        "host": host,
        "port": port,
        "username": f"{membership.user.email}.{server.id}",
        "fingerprint": reported.fingerprint if reported else "",
    }


@require_http_methods(["GET", "POST"])
@server_page(Scope.FILES_READ)
def file_edit_page(request: HttpRequest, membership: Membership, server: Server) -> HttpResponse:
    context = server_context(server, membership, "files")
    path = _path(request)
    may_write = Scope.FILES_WRITE in membership.held_scopes
    context.update(path=path, folder=_parent(path), may_write=may_write)
    if request.method == "POST":
        if Scope.FILES_WRITE not in membership.held_scopes:
            raise PermissionDenied("Saving a file needs the scope files:write.")
        content = request.POST.get("content", "").replace("\r\n", "\n").encode()
        try:
            files_write(server=server, path=path, content=content, actor=person(request))
        except DomainError as refusal:
            context.update(error=refusal_message(refusal), content=request.POST.get("content", ""))
            return render(request, "servers/file_edit.html", context, status=400)
        messages.success(request, f"Saved {path}.")
        return back_to_folder(server, _parent(path))
    try:
        data = files_read(server=server, path=path)
        context["content"] = data.decode()
    except UnicodeDecodeError:
        context["error"] = "Not a text file (UTF-8): download it instead."
    except DomainError as refusal:
        context["error"] = refusal_message(refusal)
    return render(request, "servers/file_edit.html", context)


@require_GET
@server_page(Scope.FILES_READ)
def file_download_page(
    request: HttpRequest, membership: Membership, server: Server
) -> HttpResponse:
    """A fresh single-use link to the file, followed at once (the browser fetches it from the
    node). A GET, so the redirect to another origin is a plain navigation."""
    path = _path(request)
    try:
        link = files_download_link(server=server, path=path, actor=person(request))
    except DomainError as refusal:
        refused(request, refusal)
        return back_to_folder(server, _parent(path))
    return redirect(link.url)


@require_POST
@server_page(Scope.FILES_WRITE)
def files_upload_link_page(
    request: HttpRequest, membership: Membership, server: Server
) -> HttpResponse:
    try:
        folder = _path(request)
        link = files_upload_link(server=server, directory=folder, actor=person(request))
    except DomainError as refusal:
        return JsonResponse({"error": refusal_message(refusal)}, status=400)
    return JsonResponse({"url": link.url, "expires_at": link.expires_at.isoformat()})


@require_POST
@server_page(Scope.FILES_WRITE)
def files_change_page(request: HttpRequest, membership: Membership, server: Server) -> HttpResponse:
    """One of the folder's forms: new folder, rename, compress or decompress."""
    folder = _path(request, "folder")
    # a form's own field, or its button's (formaction="…?action=compress")
    action = request.POST.get("action") or request.GET.get("action", "")
    actor = person(request)
    try:
        if action == "directory":
            made = _join(folder, request.POST.get("name", ""))
            files_make_directory(server=server, path=made, actor=actor)
            messages.success(request, f"Made the folder {made}.")
        elif action == "rename":
            source = _path(request)
            target = _join(_parent(source), request.POST.get("name", ""))
            files_rename(server=server, source=source, target=target, actor=actor)
            messages.success(request, f"Renamed {source} to {target}.")
        elif action == "compress":
            paths = [clean_path(p, "paths") for p in request.POST.getlist("paths")]
            archive = _join(folder, request.POST.get("name", "") or "archive.tar.gz")
            if not paths:
                raise DomainError("Choose the files to compress.")
            files_compress(server=server, paths=paths, archive=archive, actor=actor)
            messages.success(request, f"Compressed into {archive}.")
        elif action == "decompress":
            archive = _path(request)
            files_decompress(server=server, archive=archive, directory=folder, actor=actor)
            messages.success(request, f"Unpacked {archive}.")
        else:
            messages.error(request, "Unknown action.")
    except DomainError as refusal:
        refused(request, refusal)
    return back_to_folder(server, folder)


@require_POST
@server_page(Scope.FILES_DELETE)
def files_delete_page(request: HttpRequest, membership: Membership, server: Server) -> HttpResponse:
    folder = _path(request, "folder")
    try:
        paths = [clean_path(p, "paths") for p in request.POST.getlist("paths")]
        if not paths:
            raise DomainError("Choose what to delete.")
        files_delete(server=server, paths=paths, actor=person(request))
        messages.success(request, f"Deleted {', '.join(paths)}.")
    except DomainError as refusal:
        refused(request, refusal)
    return back_to_folder(server, folder)
