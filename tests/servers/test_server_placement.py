"""Which node a new server goes on (`createserver [--node]`): the placement rule over online,
not drained nodes with the game, a port and room for the plan; its port and address."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from servers.game.capabilities import Capability, is_supported
from servers.game.settings import desired_settings
from servers.models import Node, Server
from tests.conftest import API, client_for
from tests.servers.node_fixtures import online, register


def createserver(*args):
    out = StringIO()
    call_command("createserver", *args, stdout=out)
    return Server.objects.select_related("node").get(id=out.getvalue().strip())


def test_it_puts_a_server_on_the_simulated_node_while_there_is_no_agent_node(acme):
    server = createserver("acme", "Survival")
    assert (server.node.name, server.game, server.port) == ("simulated", "minecraft", None)


def test_it_puts_a_server_on_the_node_with_the_most_free_memory(acme):
    online("small", memory=4096)
    online("big", memory=16384)
    server = createserver("acme", "Demo")
    assert (server.node.name, server.game) == ("big", "demo")


def test_free_memory_counts_the_plans_of_the_servers_already_there(acme):
    online("node-a", memory=8192)
    online("node-b", memory=6144)
    createserver("acme", "Big", "--node", "node-a", "--memory", "4096")
    assert createserver("acme", "Next").node.name == "node-b"


def test_among_nodes_with_as_much_free_memory_it_takes_the_one_with_fewest_servers(acme):
    online("two", memory=8192)
    online("one", memory=8192)
    createserver("acme", "A", "--node", "two", "--memory", "512")
    createserver("acme", "B", "--node", "two", "--memory", "512")
    createserver("acme", "C", "--node", "one", "--memory", "1024")
    assert createserver("acme", "Next").node.name == "one"


def test_it_skips_an_unreachable_node(acme):
    gone = online("gone", memory=65536)
    Node.objects.filter(id=gone.id).update(last_heartbeat_at=timezone.now() - timedelta(minutes=1))
    online("here", memory=4096)
    assert createserver("acme", "Demo").node.name == "here"


def test_it_skips_a_drained_node(acme):
    online("drained", memory=65536, ports="27000-27099")
    Node.objects.filter(name="drained").update(drained=True)
    online("open", memory=4096)
    assert createserver("acme", "Demo").node.name == "open"


def test_it_skips_a_node_without_room_for_the_plans_disk(acme):
    online("no-disk", memory=65536, disk=5000)
    online("disk", memory=4096, disk=100000)
    assert createserver("acme", "Demo", "--disk", "10240").node.name == "disk"


def test_overallocation_lets_plans_go_beyond_capacity(acme):
    online("node-a", memory=2048, overallocate_percent=0)
    Node.objects.filter(name="node-a").update(overallocate_percent=50)
    assert createserver("acme", "Big", "--memory", "3072").node.name == "node-a"


def test_it_refuses_naming_memory_when_no_node_has_room_for_it(acme):
    online("node-a", memory=2048)
    with pytest.raises(CommandError, match=r"memory is short on node-a\."):
        createserver("acme", "Big", "--game", "demo", "--memory", "4096")
    assert not Server.objects.exists()


def test_it_refuses_naming_disk_when_no_node_has_room_for_it(acme):
    online("node-a", disk=5000)
    with pytest.raises(CommandError, match=r"disk is short on node-a\."):
        createserver("acme", "Big", "--game", "demo", "--disk", "6000")


def test_it_refuses_naming_ports_when_no_node_has_a_free_one(acme):
    online("full", ports="27000-27000")
    createserver("acme", "First", "--node", "full")
    with pytest.raises(CommandError, match=r"ports are short on full\."):
        createserver("acme", "Second", "--game", "demo")


def test_it_keeps_to_nodes_with_every_tag_asked_for(acme):
    online("plain", memory=65536)
    online("eu-ssd", memory=4096)
    Node.objects.filter(name="eu-ssd").update(tags=["eu", "ssd"])
    assert createserver("acme", "Demo", "--tags", "ssd,eu").node.name == "eu-ssd"


def test_it_puts_a_game_only_on_a_node_that_offers_it(acme):
    online("shipped", memory=65536)
    online("own", memory=4096, games=("demo", "freeciv", "mygame"))
    server = createserver("acme", "Mine", "--game", "mygame")
    assert (server.node.name, server.game) == ("own", "mygame")


def test_it_refuses_a_game_no_node_offers_naming_the_games_offered(acme):
    online("node-a")
    with pytest.raises(CommandError, match=r"No node offers the game 'chess'; .*custom, demo"):
        createserver("acme", "X", "--game", "chess")


def test_the_plan_given_is_the_servers(acme):
    online("node-a")
    args = ("--memory", "2048", "--disk", "4096", "--cpu", "50", "--processes", "64")
    server = createserver("acme", "Demo", *args)
    plan = (server.memory_mb, server.disk_mb, server.cpu_percent, server.processes)
    assert plan == (2048, 4096, 50, 64)


def test_it_refuses_a_plan_value_out_of_bounds(acme):
    with pytest.raises(CommandError, match="memory_mb must be a whole number from 32"):
        createserver("acme", "X", "--memory", "0")


def test_it_puts_a_simulated_game_on_the_simulated_node_even_with_agent_nodes(acme):
    online("node-a")
    server = createserver("acme", "Karts", "--game", "custom")
    assert server.node.name == "simulated"


def test_it_puts_a_server_on_the_node_named(acme):
    register("node-a")
    register("node-b", ports="27000-27050")
    server = createserver("acme", "Civ", "--game", "freeciv", "--node", "node-a")
    assert (server.node.name, server.game) == ("node-a", "freeciv")


def test_a_node_named_must_have_room_for_the_plan(acme):
    online("node-a", memory=2048)
    with pytest.raises(CommandError, match=r"no room for this server's memory: 0 of 2048 MB"):
        createserver("acme", "Big", "--node", "node-a", "--memory", "4096")


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


def test_it_refuses_a_server_when_the_node_named_has_no_free_port(acme):
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
    register("node-a")
    with pytest.raises(CommandError, match=r"does not run .*it runs: custom, minecraft"):
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


def test_an_operators_own_game_has_what_the_agent_does_for_any_game(acme):
    """From a node that does not list its templates' capabilities."""
    online("own", games=("mygame",))
    server = createserver("acme", "Mine", "--game", "mygame")
    assert is_supported(server, Capability.POWER)
    assert is_supported(server, Capability.BACKUPS)
    assert not is_supported(server, Capability.SETTINGS)


def test_an_operators_own_game_has_what_its_template_lists_but_settings(acme):
    node = online("own", games=("mygame",))
    listed = ["power", "console", "players", "settings"]
    Node.objects.filter(id=node.id).update(game_capabilities={"mygame": listed})
    server = createserver("acme", "Mine", "--game", "mygame")
    assert is_supported(server, Capability.PLAYERS)
    assert is_supported(server, Capability.CONSOLE)
    assert not is_supported(server, Capability.BACKUPS)
    assert not is_supported(server, Capability.SETTINGS)  # its fields are the node's only


def test_a_template_game_has_its_templates_settings(acme):
    register("node-a")
    server = createserver("acme", "Demo", "--node", "node-a")
    assert desired_settings(server) == {
        "motd": "A gshost demo server",
        "max-players": "20",
        "difficulty": "normal",
    }


def admin_add(staff_client, acme, **fields):
    data = {
        "organization": acme.pk, "name": "Added", "game": "demo", "address": "",
        "memory_mb": "1024", "disk_mb": "10240", "cpu_percent": "100", "processes": "256",
        "restart_on_crash": "on", "transitions-TOTAL_FORMS": "0", "transitions-INITIAL_FORMS": "0",
        **fields,
    }  # fmt: skip
    return staff_client.post("/admin/servers/server/add/", data)


def test_a_server_added_in_admin_is_placed_by_the_rule(staff_client, acme):
    online("node-a")
    admin_add(staff_client, acme)
    server = Server.objects.select_related("node").get(name="Added")
    assert (server.node.name, server.port) == ("node-a", 27000)


def test_a_server_added_in_admin_keeps_the_backups_limit_given(staff_client, acme):
    online("node-a")
    admin_add(staff_client, acme, backups_limit="3")
    assert Server.objects.get(name="Added").backups_limit == 3


def test_admin_refuses_a_server_no_node_has_room_for(staff_client, acme):
    online("node-a", memory=2048)
    page = admin_add(staff_client, acme, memory_mb="4096").content.decode()
    assert "memory is short on node-a" in page
    assert not Server.objects.exists()
