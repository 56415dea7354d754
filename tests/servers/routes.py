"""Every route under /servers/{id}/, with the scope it needs and a body that would be valid."""

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # with {id}
    scope: str
    body: dict[str, Any] = field(default_factory=dict)

    def url(self, server_id: str) -> str:
        return "/api/public/v1" + self.path.format(id=server_id)

    def call(self, client: Any, server_id: str) -> Any:
        if self.method == "get":
            return client.get(self.url(server_id))
        return client.post(self.url(server_id), self.body, format="json")

    def __str__(self) -> str:
        return f"{self.method.upper()} {self.path}"


SERVER_ROUTES = [
    Route("get", "/servers/{id}", "servers:read"),
    Route("post", "/servers/{id}/power", "servers:power", {"action": "start"}),
    Route("post", "/servers/{id}/console", "console:write", {"command": "say hi"}),
    Route("get", "/servers/{id}/capabilities", "servers:read"),
    Route("get", "/servers/{id}/players", "servers:read"),
    Route("get", "/servers/{id}/realtime-stats", "servers:read"),
    Route("get", "/servers/{id}/metrics", "servers:read"),
    Route("get", "/servers/{id}/settings/history", "servers:read"),
    Route("get", "/servers/{id}/settings/drift", "servers:read"),
    Route("get", "/servers/{id}/schedules", "schedules:read"),
    Route("post", "/servers/{id}/schedules/sch_doesNotExist0000000/run", "schedules:execute"),
    Route("get", "/servers/{id}/backups", "backups:read"),
    Route("post", "/servers/{id}/backups", "backups:create"),
    Route("post", "/servers/{id}/backups/bkp_doesNotExist0000000/restore", "backups:restore"),
    Route("get", "/servers/{id}/backups/restore-jobs/job_doesNotExist0000000", "backups:read"),
    Route("post", "/servers/{id}/maintenance", "maintenance:execute", {"action": "wipe"}),
    Route("get", "/servers/{id}/migration-status", "servers:read"),
    Route("get", "/servers/{id}/config-events/status", "servers:read"),
]

ALL_SCOPES = sorted({route.scope for route in SERVER_ROUTES})
