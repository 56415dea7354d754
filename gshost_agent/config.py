"""The agent's configuration, from the environment. A missing or malformed setting stops the
agent at start with a message naming it (ConfigError)."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_DATA_DIR = "/var/lib/gshost-agent"
DEFAULT_BIND = "0.0.0.0:8444"
DEFAULT_GAME_USER = "gshost-game"
DEFAULT_SFTP_PORT = 2022


class ConfigError(ValueError):
    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting


@dataclass(frozen=True)
class Config:
    token: str
    control_url: str  # without a trailing slash
    data_dir: Path
    bind_host: str
    bind_port: int
    tls_cert: Path
    tls_key: Path
    control_ca: Path | None
    game_user: str
    games_dir: Path | None = None  # templates of the operator's own games, beside ours
    allow_unsandboxed: bool = False  # a developer's machine that cannot sandbox games
    sandbox_off: bool = False  # AGENT_SANDBOX=off: never sandbox (with allow_unsandboxed only)
    network_pool: int = 8  # games' networks, and blank filesystems, kept made ahead
    sftp_port: int = DEFAULT_SFTP_PORT  # AGENT_SFTP_PORT, on the API's address; 0: no SFTP
    # Networks a customer's pull may reach although they are not public (a test's own web
    # server on loopback); empty in production.
    pull_allowed_networks: tuple[str, ...] = ()

    def __repr__(self) -> str:  # the token never reaches a log through a repr
        return f"Config(control_url={self.control_url!r}, data_dir={str(self.data_dir)!r})"


def config_from_environment(environ: Mapping[str, str] = os.environ) -> Config:
    host, port = _bind(environ.get("AGENT_BIND", DEFAULT_BIND))
    return Config(
        token=_token(environ),
        control_url=_control_url(_required(environ, "AGENT_CONTROL_URL")),
        data_dir=_absolute(environ.get("AGENT_DATA_DIR", DEFAULT_DATA_DIR), "AGENT_DATA_DIR"),
        bind_host=host,
        bind_port=port,
        tls_cert=_readable_file(environ, "AGENT_TLS_CERT"),
        tls_key=_readable_file(environ, "AGENT_TLS_KEY"),
        control_ca=(
            _readable_file(environ, "AGENT_CONTROL_CA") if environ.get("AGENT_CONTROL_CA") else None
        ),
        game_user=_game_user(environ.get("AGENT_GAME_USER", DEFAULT_GAME_USER)),
        games_dir=_games_dir(environ.get("AGENT_GAMES_DIR", "")),
        allow_unsandboxed=_boolean(environ, "AGENT_ALLOW_UNSANDBOXED"),
        sandbox_off=_sandbox_off(environ.get("AGENT_SANDBOX", "")),
        network_pool=_network_pool(environ.get("AGENT_NETWORK_POOL", "8")),
        sftp_port=_sftp_port(environ.get("AGENT_SFTP_PORT", str(DEFAULT_SFTP_PORT))),
        pull_allowed_networks=_networks(environ.get("AGENT_PULL_ALLOWED_NETWORKS", "")),
    )


def _required(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name, "").strip()
    if not value:
        raise ConfigError(name, "required, and not set")
    return value


def _token(environ: Mapping[str, str]) -> str:
    token = _required(environ, "AGENT_TOKEN")
    if not token.isascii() or not token.isprintable() or " " in token:
        raise ConfigError("AGENT_TOKEN", "malformed (printable ASCII without spaces expected)")
    return token


def _control_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ConfigError("AGENT_CONTROL_URL", "expected an https:// URL")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError("AGENT_CONTROL_URL", "a base URL without credentials, query or fragment")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ConfigError("AGENT_CONTROL_URL", "http:// is accepted only for a loopback host")
    try:
        parts.port  # noqa: B018 (urlsplit checks the port only when asked)
    except ValueError as error:
        raise ConfigError("AGENT_CONTROL_URL", "malformed port") from error
    return value.rstrip("/")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _bind(value: str) -> tuple[str, int]:
    host, separator, port = value.strip().rpartition(":")
    host = host.strip("[]")
    if not separator or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError("AGENT_BIND", f"expected HOST:PORT, got {value!r}")
    return host, int(port)


def _absolute(value: str, name: str) -> Path:
    path = Path(value)
    if not path.is_absolute():
        raise ConfigError(name, "an absolute path expected")
    return path


def _readable_file(environ: Mapping[str, str], name: str) -> Path:
    path = _absolute(_required(environ, name), name)
    if not path.is_file() or not os.access(path, os.R_OK):
        raise ConfigError(name, f"no readable file at {path}")
    return path


def _game_user(value: str) -> str:
    name = value.strip()
    if not name or len(name) > 32 or not all(c.isalnum() or c in "-_" for c in name):
        raise ConfigError("AGENT_GAME_USER", f"not a user name: {value!r}")
    return name


def _boolean(environ: Mapping[str, str], name: str) -> bool:
    value = environ.get(name, "").strip().lower()
    if value not in ("", "true", "false"):
        raise ConfigError(name, f"true or false, not {value!r}")
    return value == "true"


def _sandbox_off(value: str) -> bool:
    if value.strip() not in ("", "auto", "off"):
        raise ConfigError("AGENT_SANDBOX", f"auto or off, not {value!r}")
    return value.strip() == "off"


def _network_pool(value: str) -> int:
    value = value.strip()
    if not (value.isascii() and value.isdigit() and len(value) <= 4 and int(value) <= 1024):
        raise ConfigError("AGENT_NETWORK_POOL", f"a number from 0 to 1024, not {value!r}")
    return int(value)


def _games_dir(value: str) -> Path | None:
    if not value:
        return None
    path = _absolute(value, "AGENT_GAMES_DIR")
    if not path.is_dir():
        raise ConfigError("AGENT_GAMES_DIR", f"no directory at {path}")
    return path


def _sftp_port(value: str) -> int:
    value = value.strip()
    if not (value.isascii() and value.isdigit() and len(value) <= 5 and int(value) < 65536):
        raise ConfigError("AGENT_SFTP_PORT", f"a port from 0 (no SFTP) to 65535, not {value!r}")
    return int(value)


def _networks(value: str) -> tuple[str, ...]:
    found = []
    for text in filter(None, (part.strip() for part in value.split(","))):
        try:
            found.append(str(ipaddress.ip_network(text, strict=False)))
        except ValueError as error:
            raise ConfigError("AGENT_PULL_ALLOWED_NETWORKS", f"not a network: {text!r}") from error
    return tuple(found)
