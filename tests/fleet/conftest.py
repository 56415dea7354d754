"""Fixtures for the fleet tests: the servers tests' stand-in agent and node helpers, and a
listener that holds connections without answering."""

from tests.fleet.holding import holding_listener
from tests.servers.node_fixtures import agent_node, demo_server, node_token, stand_in_agent

__all__ = ["agent_node", "demo_server", "holding_listener", "node_token", "stand_in_agent"]
