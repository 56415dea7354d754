"""What an integration key may be granted: the Application API's own catalogue."""

from enum import StrEnum


class IntegrationScope(StrEnum):
    CUSTOMERS_READ = "customers:read"
    CUSTOMERS_WRITE = "customers:write"
    SERVERS_READ = "servers:read"
    SERVERS_WRITE = "servers:write"
    PLANS_READ = "plans:read"
    PLANS_WRITE = "plans:write"
    NODES_READ = "nodes:read"


CATALOGUE = frozenset(scope.value for scope in IntegrationScope)
