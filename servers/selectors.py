"""Reads of servers, always through the caller's organization and the key's restrictions."""

from collections.abc import Iterable

from django.db.models import QuerySet

from accounts.key_records import KeyRecord
from gshost.api.errors import server_not_found
from servers.models import Server


def server_ids_in_organization(organization_id: str, server_ids: Iterable[str]) -> set[str]:
    wanted = list(server_ids)
    if not wanted:
        return set()
    found = Server.objects.filter(organization_id=organization_id, id__in=wanted)
    return set(found.values_list("id", flat=True))


def server_list_for_organization(organization_id: str) -> QuerySet[Server]:
    return Server.objects.filter(organization_id=organization_id)


def server_list_for_key(key: KeyRecord) -> QuerySet[Server]:
    servers = server_list_for_organization(key.organization_id)
    if key.server_restrictions:
        servers = servers.filter(id__in=sorted(key.server_restrictions))
    return servers


def server_get_for_key(key: KeyRecord, server_id: str) -> Server:
    """The server, or 404 server_not_found: the same answer for foreign, restricted or absent."""
    if not key.allows_server(server_id):
        raise server_not_found()
    server = Server.objects.filter(organization_id=key.organization_id, id=server_id).first()
    if server is None:
        raise server_not_found()
    return server
