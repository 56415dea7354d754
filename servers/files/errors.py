"""The refusals of the file routes, in the codes the agent and the contract share."""

from gshost.errors import (
    DomainError,
    InvalidInput,
    InvalidState,
    NotFound,
    NotPermitted,
    RateLimited,
    RefusedValue,
    TooLarge,
)


class PathInvalid(InvalidInput):
    code = "invalid_path"
    default_message = "The path leaves the server directory, holds NUL or is too long."


class PathOutside(NotPermitted):
    code = "path_outside_server"
    default_message = "The path goes through a link out of the server directory."


class FileDenied(NotPermitted):
    code = "file_denied"
    default_message = "The server's game does not allow this path."


class FileNotFound(NotFound):
    code = "file_not_found"
    default_message = "No such file or directory."


class NotADirectory(InvalidInput):
    code = "not_a_directory"
    default_message = "Not a directory."


class NotAFile(InvalidInput):
    code = "not_a_file"
    default_message = "Not a regular file."


class FileExists(InvalidState):
    code = "file_exists"
    default_message = "Something already has that name."


class DirectoryNotEmpty(InvalidState):
    code = "directory_not_empty"
    default_message = "The directory is not empty."


class DiskLimit(InvalidState):
    code = "disk_limit_exceeded"
    default_message = "That would take the server's files over its disk limit."


class FileTooLarge(TooLarge):
    code = "file_too_large"
    default_message = "Over 8 MiB: use a download or upload link."


class InvalidArchive(InvalidInput):
    code = "invalid_archive"
    default_message = "The archive cannot be unpacked."


class InvalidUrl(RefusedValue):
    code = "invalid_url"
    default_message = "The URL cannot be pulled."


class PullFailed(RefusedValue):
    code = "pull_failed"
    default_message = "The URL did not answer with a file."


class PullsLimited(RateLimited):
    default_message = "At most 10 pulls per server per 5 minutes."


# The agent's codes (gshost_agent.files.jail and routes) and what each one is here.
AGENT_CODES: dict[str, type[DomainError]] = {
    kind.code: kind
    for kind in (
        PathInvalid, PathOutside, FileDenied, FileNotFound, NotADirectory, NotAFile, FileExists,
        DirectoryNotEmpty, DiskLimit, FileTooLarge, InvalidArchive, InvalidUrl, PullFailed,
    )
}  # fmt: skip
AGENT_CODES["rate_limited"] = PullsLimited
AGENT_CODES["invalid_request"] = InvalidInput  # a cursor the node does not take
# Members of the agent's error the customer is told too.
PASSED_ON = ("reason", "retry_after")
