from accounts.models import Organization
from servers.models import Game, Server


def server_create(
    *, organization: Organization, name: str, game: str = Game.MINECRAFT, address: str = ""
) -> Server:
    """A new server of the organization; it starts `stopped`."""
    if game not in Game.values:
        raise ValueError(f"Unknown game {game!r}; choose from {', '.join(Game.values)}.")
    server = Server(organization=organization, name=name, game=game)
    server.address = address or _default_address(server.id)
    server.save(force_insert=True)
    return server


def _default_address(server_id: str) -> str:
    """A plausible public address in the documentation range, stable per server."""
    seed = sum(server_id.encode())
    return f"203.0.113.{seed % 250 + 1}:{25565 + seed % 100}"
