"""A game's settings file, written and read in the server's directory.

That directory belongs to the game, which may have put a symbolic link where the file goes:
the agent (root) never follows one, neither to write (a new file, then a rename over the name)
nor to read (O_NOFOLLOW).
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from gshost_agent.templates import GameTemplate

READ_LIMIT = 256 * 1024


class InvalidSettings(ValueError):
    pass


def settings_for(template: GameTemplate, given: dict[str, object]) -> dict[str, str]:
    """The template's defaults with `given` over them; InvalidSettings for an unknown key or a
    value that would break the file's lines."""
    known = {spec.key for spec in template.settings_fields}
    settings = template.default_settings()
    for key, value in given.items():
        if key not in known:
            raise InvalidSettings(f"unknown setting {key!r} for {template.name}")
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str | int):
            text = str(value)
        else:
            raise InvalidSettings(f"setting {key!r} must be a string or a number")
        if len(text) > 1000 or not text.isprintable():
            raise InvalidSettings(f"setting {key!r} must be one printable line")
        settings[key] = text
    return settings


def render(template: GameTemplate, settings: dict[str, str]) -> str:
    if template.settings_format == "freeciv":
        return "".join(f"set {key} {value}\n" for key, value in settings.items())
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def parse(template: GameTemplate, text: str) -> dict[str, str]:
    settings: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if template.settings_format == "freeciv":
            verb, _, rest = line.partition(" ")
            key, _, value = rest.strip().partition(" ")
            if verb == "set" and key:
                settings[key] = value.strip().strip('"')
        elif "=" in line:
            key, value = line.split("=", 1)
            settings[key.strip()] = value.strip()
    return settings


def write_settings(
    directory: Path, template: GameTemplate, settings: dict[str, str], gid: int | None
) -> None:
    if not template.settings_file:
        return
    temporary = directory / f".{template.settings_file}.{secrets.token_hex(4)}"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o660)
    try:
        if gid is not None:
            os.fchown(descriptor, 0, gid)
        os.write(descriptor, render(template, settings).encode())
    finally:
        os.close(descriptor)
    os.replace(temporary, directory / template.settings_file)


def read_settings(directory: Path, template: GameTemplate) -> dict[str, str]:
    if not template.settings_file:
        return {}
    try:
        # O_NONBLOCK: a FIFO in its place must not hang the agent.
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
        descriptor = os.open(directory / template.settings_file, flags)
    except OSError:
        return {}
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return {}
        data = os.read(descriptor, READ_LIMIT)
    finally:
        os.close(descriptor)
    return parse(template, data.decode("utf-8", errors="replace"))
