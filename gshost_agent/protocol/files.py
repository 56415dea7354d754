"""A customer's file path (the file routes, SFTP): "/" is the server directory's root."""

from __future__ import annotations

FILE_PATH_MAX_BYTES = 4096


class InvalidFilePath(ValueError):
    """A customer path that leaves the root, holds NUL or is over FILE_PATH_MAX_BYTES."""


def file_path_parts(path: str) -> tuple[str, ...]:
    """The components of a customer path beneath the root: "." and ".." worked out, repeated
    slashes dropped ("/a/../b" -> ("b",)). InvalidFilePath says why one is refused."""
    if not isinstance(path, str) or "\x00" in path:
        raise InvalidFilePath("the path holds NUL")
    try:
        encoded = path.encode("utf-8", "surrogateescape")
    except UnicodeError as error:
        raise InvalidFilePath("the path is not text") from error
    if len(encoded) > FILE_PATH_MAX_BYTES:
        raise InvalidFilePath(f"the path is over {FILE_PATH_MAX_BYTES:,} bytes")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise InvalidFilePath("the path leaves the server directory")
            parts.pop()
            continue
        parts.append(part)
    return tuple(parts)


def file_path(path: str) -> str:
    """The customer path normalized ("//a/./b/" -> "/a/b")."""
    return "/" + "/".join(file_path_parts(path))
