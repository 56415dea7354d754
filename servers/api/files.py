"""The file routes under /servers/{id}/files (docs/files.md): thin views over servers.files."""

from typing import Any

from django.core.validators import RegexValidator
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from accounts.scopes import Scope
from audit.services import note_audit_details
from gshost.api.fields import StrictCharField, TimestampField
from gshost.api.input import parse_input
from gshost.api.pagination import parse_limit
from gshost.api.schema import ERROR_CODES
from servers.api.base import ServerRouteViewSet
from servers.files.agent import CONTENT_LIMIT
from servers.files.errors import FileTooLarge
from servers.files.services import (
    LIST_DEFAULT,
    LIST_MOST,
    clean_path,
    files_compress,
    files_copy,
    files_decompress,
    files_delete,
    files_download_link,
    files_list,
    files_make_directory,
    files_pull,
    files_read,
    files_rename,
    files_upload_link,
    files_write,
)

MAX_PATHS = 1000
# What a schema can say of a customer path: text without NUL. The node also refuses a path that
# leaves the server directory and one over FILE_PATH_MAX_BYTES bytes of UTF-8 (400 path_invalid).
PATH_PATTERN = r"^[^\x00]+$"
# A listing's cursor: base64url, padded (servers.files.services).
CURSOR_PATTERN = r"^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2}==|[A-Za-z0-9_-]{3}=)?$"
# Every file route: a bad path is 400 invalid_path; files live on agent nodes, so a server
# elsewhere is 409 invalid_state, whatever the method.
FILE_ERRORS = {
    ERROR_CODES: {400: ["invalid_path"], 409: ["invalid_state"], 503: ["node_unavailable"]}
}


class PathField(StrictCharField):
    """A customer path. The schema states that it holds no NUL; one that does is refused as
    the node refuses any bad path (400 invalid_path), not as a malformed body."""

    def __init__(self) -> None:
        super().__init__(trim_whitespace=False, validators=[RegexValidator(PATH_PATTERN)])

    def run_validation(self, data: Any = empty) -> Any:
        if isinstance(data, str) and "\x00" in data:
            clean_path(data, self.field_name or str(getattr(self.parent, "field_name", "path")))
        return super().run_validation(data)


class FileEntrySerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    path = serializers.CharField()
    type = serializers.ChoiceField(choices=["file", "directory", "symlink"])
    size = serializers.IntegerField()
    mode = serializers.CharField(help_text='Permission bits in octal, e.g. "0644".')
    modified_at = serializers.CharField()


class FileListSerializer(serializers.Serializer[Any]):
    path = serializers.CharField()
    results = FileEntrySerializer(many=True)
    next = serializers.CharField(allow_null=True)


class WorkSerializer(serializers.Serializer[Any]):
    state = serializers.ChoiceField(
        choices=["done", "running"], help_text="running: the node goes on with it."
    )


class LinkSerializer(serializers.Serializer[Any]):
    url = serializers.URLField()
    expires_at = TimestampField()


class PathInput(serializers.Serializer[Any]):
    path = PathField()


class PathsInput(serializers.Serializer[Any]):
    paths = serializers.ListField(child=PathField(), min_length=1, max_length=MAX_PATHS)


class RenameInput(serializers.Serializer[Any]):
    from_ = PathField()
    to = PathField()

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")
        return fields


class CompressInput(PathsInput):
    archive = PathField()


class DecompressInput(serializers.Serializer[Any]):
    archive = PathField()
    directory = PathField()


class PullInput(serializers.Serializer[Any]):
    url = serializers.CharField(max_length=8192)
    path = PathField()


class DirectoryInput(serializers.Serializer[Any]):
    directory = PathField()


PATH_PARAMETER = OpenApiParameter(
    "path", str, required=True, pattern=PATH_PATTERN, description="A path from the server's root, /"
)
LIST_PARAMETERS = [
    OpenApiParameter("path", str, pattern=PATH_PATTERN, description="The directory; default /"),
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1},
        description=f"Entries per page, default {LIST_DEFAULT}; at most {LIST_MOST} are returned.",
    ),
    OpenApiParameter(
        "cursor", str, pattern=CURSOR_PATTERN, description="Taken from a page's `next`, unchanged."
    ),
]


DELETED = OpenApiResponse(description='{"deleted": [paths]}')


class FilesViewSet(ServerRouteViewSet):
    scopes = {
        "listing": Scope.FILES_READ,
        "read": Scope.FILES_READ,
        "write": Scope.FILES_WRITE,
        "rename": Scope.FILES_WRITE,
        "copy": Scope.FILES_WRITE,
        "directory": Scope.FILES_WRITE,
        "compress": Scope.FILES_WRITE,
        "decompress": Scope.FILES_WRITE,
        "pull": Scope.FILES_WRITE,
        "upload_link": Scope.FILES_WRITE,
        "delete_paths": Scope.FILES_DELETE,
        "download_link": Scope.FILES_READ,
    }

    def _note(self, action: str | None = None, **details: Any) -> None:
        note_audit_details(self.request._request, details, action=action)

    @extend_schema(parameters=LIST_PARAMETERS, responses=FileListSerializer,
                   extensions=FILE_ERRORS)  # fmt: skip
    def listing(self, request: Request, server_id: str) -> Response:
        """One page of a directory (an action not named `list`: the answer is one object)."""
        server = self.server()
        path = clean_path(request.query_params.get("path", "/"))
        listing = files_list(
            server=server,
            path=path,
            limit=_limit(request),
            cursor=request.query_params.get("cursor"),
        )
        url = request.build_absolute_uri()
        next_url = replace_query_param(url, "cursor", listing.cursor) if listing.cursor else None
        return Response({"path": listing.path, "results": listing.results, "next": next_url})

    @extend_schema(
        parameters=[PATH_PARAMETER],
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY},
        extensions=FILE_ERRORS,
    )
    def read(self, request: Request, server_id: str) -> HttpResponse:
        server = self.server()
        path = clean_path(request.query_params.get("path"))
        content = files_read(server=server, path=path)
        return HttpResponse(content, content_type="application/octet-stream")

    @extend_schema(
        parameters=[PATH_PARAMETER],
        request={"application/octet-stream": OpenApiTypes.BINARY},
        responses=FileEntrySerializer,
        extensions=FILE_ERRORS,
    )
    def write(self, request: Request, server_id: str) -> Response:
        server = self.server()
        path = clean_path(request.query_params.get("path"))
        self._note("files.write", path=path)
        given = request.META.get("CONTENT_LENGTH") or "0"
        if not given.isdigit() or int(given) > CONTENT_LIMIT:
            raise FileTooLarge()
        # The body as it came, whatever its type: no parser reads it.
        content = request._request.read(CONTENT_LIMIT + 1)
        if len(content) > CONTENT_LIMIT:
            raise FileTooLarge()
        entry = files_write(server=server, path=path, content=content, actor=self.actor())
        return Response(entry)

    @extend_schema(request=RenameInput, responses=FileEntrySerializer, extensions=FILE_ERRORS)
    def rename(self, request: Request, server_id: str) -> Response:
        server = self.server()
        given = parse_input(request, RenameInput)
        source, target = clean_path(given["from"], "from"), clean_path(given["to"], "to")
        self._note(**{"from": source, "to": target})
        return Response(
            files_rename(server=server, source=source, target=target, actor=self.actor())
        )

    @extend_schema(request=PathInput, responses=WorkSerializer, extensions=FILE_ERRORS)
    def copy(self, request: Request, server_id: str) -> Response:
        server = self.server()
        path = clean_path(parse_input(request, PathInput)["path"])
        self._note(path=path)
        return _work(files_copy(server=server, path=path, actor=self.actor()))

    @extend_schema(request=PathInput, responses={201: FileEntrySerializer},
                   extensions=FILE_ERRORS)  # fmt: skip
    def directory(self, request: Request, server_id: str) -> Response:
        server = self.server()
        path = clean_path(parse_input(request, PathInput)["path"])
        self._note(path=path)
        return Response(files_make_directory(server=server, path=path, actor=self.actor()), 201)

    @extend_schema(request=PathsInput, responses=DELETED, extensions=FILE_ERRORS)
    def delete_paths(self, request: Request, server_id: str) -> Response:
        # Not named `delete`: a view's `delete` method would put DELETE in every route's Allow.
        server = self.server()
        paths = [clean_path(path, "paths") for path in parse_input(request, PathsInput)["paths"]]
        self._note(paths=paths)
        return Response(files_delete(server=server, paths=paths, actor=self.actor()))

    @extend_schema(request=CompressInput, responses=WorkSerializer, extensions=FILE_ERRORS)
    def compress(self, request: Request, server_id: str) -> Response:
        server = self.server()
        given = parse_input(request, CompressInput)
        paths = [clean_path(path, "paths") for path in given["paths"]]
        archive = clean_path(given["archive"], "archive")
        self._note(paths=paths, archive=archive)
        made = files_compress(server=server, paths=paths, archive=archive, actor=self.actor())
        return _work(made)

    @extend_schema(request=DecompressInput, responses=WorkSerializer, extensions=FILE_ERRORS)
    def decompress(self, request: Request, server_id: str) -> Response:
        server = self.server()
        given = parse_input(request, DecompressInput)
        archive = clean_path(given["archive"], "archive")
        directory = clean_path(given["directory"], "directory")
        self._note(archive=archive, directory=directory)
        done = files_decompress(
            server=server, archive=archive, directory=directory, actor=self.actor()
        )
        return _work(done)

    @extend_schema(request=PullInput, responses=WorkSerializer, extensions=FILE_ERRORS)
    def pull(self, request: Request, server_id: str) -> Response:
        server = self.server()
        given = parse_input(request, PullInput)
        path = clean_path(given["path"])
        self._note(url=given["url"], path=path)
        return _work(files_pull(server=server, url=given["url"], path=path, actor=self.actor()))

    @extend_schema(request=PathInput, responses=LinkSerializer, extensions=FILE_ERRORS)
    def download_link(self, request: Request, server_id: str) -> Response:
        server = self.server()
        path = clean_path(parse_input(request, PathInput)["path"])
        self._note(path=path)
        link = files_download_link(server=server, path=path, actor=self.actor())
        return Response(LinkSerializer(link).data)

    @extend_schema(request=DirectoryInput, responses=LinkSerializer, extensions=FILE_ERRORS)
    def upload_link(self, request: Request, server_id: str) -> Response:
        server = self.server()
        directory = clean_path(parse_input(request, DirectoryInput)["directory"], "directory")
        self._note(directory=directory)
        link = files_upload_link(server=server, directory=directory, actor=self.actor())
        return Response(LinkSerializer(link).data)


def _work(answer: dict[str, Any]) -> Response:
    """200 with the result when the node finished, 202 `{"state": "running"}` while it goes on."""
    return Response(answer, status=202 if answer.get("state") == "running" else 200)


def _limit(request: Request) -> int:
    return parse_limit(request.query_params.get("limit"), default=LIST_DEFAULT, most=LIST_MOST)
