"""Which node a new server goes on (`createserver [--node]`), its port and address, and the
games each kind of node runs."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from servers.capabilities import Capability, is_supported
from servers.configuration import desired_settings
from servers.models import Server
from tests.conftest import API, client_for
from tests.servers.node_fixtures import register


def createserver(*args):
    out = StringIO()
    call_command("createserver", *args, stdout=out)
    return Server.objects.select_related("node").get(id=out.getvalue().strip())


def test_it_puts_a_server_on_the_simulated_node_while_there_is_no_agent_node(acme):
    server = createserver("acme", "Survival")
    assert (server.node.name, server.game, server.port) == ("simulated", "minecraft", None)


def test_it_puts_a_server_on_the_agent_node_with_the_most_free_ports(acme):
    register("small", ports="27000-27001")
    register("big", ports="27000-27009")
    server = createserver("acme", "Demo")
    assert (server.node.name, server.game) == ("big", "demo")


def test_it_skips_an_agent_node_that_is_full(acme):
    register("full", ports="27000-27000")
    createserver("acme", "First", "--node", "full")
    server = createserver("acme", "Second")
    assert server.node.name == "simulated"


def test_it_puts_a_simulated_game_on_the_simulated_node_even_with_agent_nodes(acme):
    register("node-a")
    server = createserver("acme", "Karts", "--game", "custom")
    assert server.node.name == "simulated"


def test_it_puts_a_server_on_the_node_named(acme):
    register("node-a")
    register("node-b", ports="27000-27050")
    server = createserver("acme", "Civ", "--game", "freeciv", "--node", "node-a")
    assert (server.node.name, server.game) == ("node-a", "freeciv")


def test_an_agent_server_takes_a_port_of_the_range_and_the_nodes_address(acme):
    register("node-a", address="198.51.100.7", ports="28000-28002")
    first = createserver("acme", "One", "--node", "node-a")
    second = createserver("acme", "Two", "--node", "node-a")
    assert (first.port, second.port) == (28000, 28001)
    assert (first.address, second.address) == ("198.51.100.7:28000", "198.51.100.7:28001")


def test_a_freed_port_is_taken_again(acme):
    register("node-a", ports="28000-28002")
    first = createserver("acme", "One", "--node", "node-a")
    createserver("acme", "Two", "--node", "node-a")
    first.delete()
    assert createserver("acme", "Three", "--node", "node-a").port == 28000


def test_it_refuses_a_server_when_the_node_has_no_free_port(acme):
    register("node-a", ports="28000-28000")
    createserver("acme", "One", "--node", "node-a")
    with pytest.raises(CommandError, match="no free port: 28000-28000"):
        createserver("acme", "Two", "--node", "node-a")


def test_ports_are_per_node(acme):
    register("node-a", ports="28000-28001")
    register("node-b", ports="28000-28001")
    a = createserver("acme", "A", "--node", "node-a")
    b = createserver("acme", "B", "--node", "node-b")
    assert a.port == b.port == 28000


@pytest.mark.parametrize("game", ["minecraft", "custom"])
def test_it_refuses_a_simulated_game_on_an_agent_node_naming_its_games(acme, game):
    register("node-a")
    with pytest.raises(CommandError, match=r"does not run .*it runs: demo, freeciv"):
        createserver("acme", "X", "--game", game, "--node", "node-a")
    assert not Server.objects.exists()


@pytest.mark.parametrize("game", ["demo", "freeciv"])
def test_it_refuses_a_template_game_on_the_simulated_node_naming_its_games(acme, game):
    with pytest.raises(CommandError, match=r"does not run .*it runs: minecraft, custom"):
        createserver("acme", "X", "--game", game, "--node", "simulated")


def test_it_refuses_an_unknown_node(acme):
    with pytest.raises(CommandError, match="No node named 'nowhere'"):
        createserver("acme", "X", "--node", "nowhere")


def test_the_server_record_names_its_node(acme, make_key):
    register("node-a", address="198.51.100.7", ports="28000-28001")
    server = createserver("acme", "Demo", "--node", "node-a")
    body = client_for(make_key(["servers:read"])).get(f"{API}/servers/{server.id}").json()
    assert (body["node"], body["address"]) == ("node-a", "198.51.100.7:28000")


def test_a_template_game_has_its_templates_capabilities(acme):
    register("node-a")
    server = createserver("acme", "Demo", "--node", "node-a")
    assert is_supported(server, Capability.CONSOLE)
    assert is_supported(server, Capability.PLAYERS)
    assert is_supported(server, Capability.BACKUPS)
    assert is_supported(server, Capability.MIGRATION)


def test_a_template_game_has_its_templates_settings(acme):
    register("node-a")
    server = createserver("acme", "Demo", "--node", "node-a")
    assert desired_settings(server) == {
        "motd": "A gshost demo server",
        "max-players": "20",
        "difficulty": "normal",
    }
