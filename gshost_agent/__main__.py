"""`gshost-agent`: the node agent's process.

SIGTERM or SIGINT end it within seconds and leave the games running (an upgrade, a restart:
the next agent reattaches to them), unless it was started with `--stop-servers-on-exit`
(`make run`): then it stops every game first, reports `stopped_by_node` for each, tries briefly
to deliver its reports, and leaves no process behind.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import ssl
import sys

from aiohttp import web

from gshost_agent.api import make_app
from gshost_agent.config import Config, ConfigError, config_from_environment
from gshost_agent.layout import LayoutError, UnsafeDirectory
from gshost_agent.node import Node

logger = logging.getLogger("gshost_agent")

# With --stop-servers-on-exit everything must be over within 10 s.
STOP_GRACE_SECONDS = 5.0
KILL_WAIT_SECONDS = 1.5
FLUSH_SECONDS = 1.5
HTTP_SHUTDOWN_SECONDS = 0.5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gshost-agent", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--stop-servers-on-exit",
        action="store_true",
        help="stop every game server when the agent ends (default: leave them running)",
    )
    arguments = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = config_from_environment()
        tls = server_tls(config)
    except ConfigError as error:
        print(f"gshost-agent: {error}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(config, tls, stop_servers=arguments.stop_servers_on_exit))
    except UnsafeDirectory as error:
        print(f"gshost-agent: {error}", file=sys.stderr)
        return 2
    except (LayoutError, OSError) as error:
        print(f"gshost-agent: {error}", file=sys.stderr)
        return 1
    return 0


def server_tls(config: Config) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(config.tls_cert, config.tls_key)
    except (ssl.SSLError, OSError) as error:
        raise ConfigError("AGENT_TLS_CERT", f"cannot use it with AGENT_TLS_KEY: {error}") from error
    return context


async def serve(config: Config, tls: ssl.SSLContext, *, stop_servers: bool) -> None:
    node = Node(config)
    await node.start()
    runner = web.AppRunner(
        make_app(node, config.token), access_log=None, shutdown_timeout=HTTP_SHUTDOWN_SECONDS
    )
    await runner.setup()
    site = web.TCPSite(runner, config.bind_host, config.bind_port, ssl_context=tls)
    await site.start()
    logger.info("listening on https://%s:%s", config.bind_host, config.bind_port)
    ending = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, ending.set)
    await ending.wait()
    logger.info("ending%s", " and stopping every game server" if stop_servers else "")
    await runner.cleanup()
    if stop_servers:
        await node.stop_servers(grace=STOP_GRACE_SECONDS, kill_wait=KILL_WAIT_SECONDS)
    await node.close(flush_seconds=FLUSH_SECONDS if stop_servers else 0.0)


if __name__ == "__main__":
    sys.exit(main())
