"""The configuration files of HAProxy and PgBouncer, the settings that matter spelled out.

docs/operations.md explains each value; keep the two in step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# HAProxy probes every replica's /readyz each second; three failures take it out, two
# successes bring it back. A dead replica refuses the probe at once: out within about 3 s. A
# busy one has CHECK_TIMEOUT to answer, so a load peak does not empty the pool.
CHECK_INTERVAL_MS = 1000
CHECK_FALL = 3
CHECK_RISE = 2
CHECK_TIMEOUT = "3s"
# One JSON line in the API's envelope when no replica can answer.
NO_REPLICA_BODY = (
    '{"error": {"code": "service_unavailable", '
    '"message": "No web replica can answer just now. Retry later.", "retry_after": 5}}'
)


@dataclass(frozen=True)
class Backend:
    name: str
    address: str
    port: int
    # Requests in flight on the replica at once: its threads. Beyond that HAProxy queues them
    # (`timeout queue`), so a replica never holds a backlog its health check would wait behind.
    maxconn: int


def haproxy_config(*, port: int, backends: Sequence[Backend], stats_socket: str) -> str:
    servers = "\n".join(
        f"    server {b.name} {b.address}:{b.port} check maxconn {b.maxconn}" for b in backends
    )
    return f"""global
    maxconn 4096
    stats socket {stats_socket} mode 600 level admin

defaults
    mode http
    option httplog
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout http-request 10s
    timeout queue 10s
    timeout check {CHECK_TIMEOUT}
    # A connection refused by a dead replica is retried on another one; a request that
    # reached a replica is never sent twice (it may have been a write).
    retries 3
    option redispatch 1
    # A new connection to the replica for every request: a dead replica then refuses it and
    # the request goes to another one, where a kept-alive connection would have failed it.
    option http-server-close

frontend api
    bind 127.0.0.1:{port}
    option forwardfor
    http-request set-header X-Forwarded-Proto http
    default_backend web

backend web
    balance leastconn
    # /readyz answers 503 when the replica cannot reach the database or Redis. Only the
    # database counts here: a Redis outage is shared by every replica, and the service keeps
    # answering without Redis, so it must not empty the pool.
    option httpchk
    http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host localhost
    http-check expect rstring "\\"database\\": \\"ok\\""
    default-server inter {CHECK_INTERVAL_MS} fall {CHECK_FALL} rise {CHECK_RISE}
    http-error status 503 content-type application/json string '{NO_REPLICA_BODY}' hdr Retry-After 5
{servers}
"""


def pgbouncer_config(
    *,
    listen: Sequence[str],
    port: int,
    database: str,
    upstream_host: str,
    upstream_port: int,
    auth_file: str,
    pool_size: int,
) -> str:
    return f"""[databases]
{database} = host={upstream_host} port={upstream_port} dbname={database}

[pgbouncer]
listen_addr = {",".join(listen)}
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {auth_file}
pool_mode = transaction
; every replica thread and worker process may hold a client connection
max_client_conn = 1000
; server connections per database and user: what PostgreSQL actually serves
default_pool_size = {pool_size}
reserve_pool_size = 0
; a client waiting this long for a server connection gets an error (503), not a hang
query_wait_timeout = 10
server_connect_timeout = 3
server_login_retry = 1
server_idle_timeout = 60
ignore_startup_parameters = extra_float_digits
log_connections = 0
log_disconnections = 0
admin_users = postgres
"""
