"""The panel's live console of a server on an agent node never waits for the node: it answers
from the mirror of the node's console lines, and fetches more in the background."""

import threading

import pytest
from freezegun import freeze_time

from servers.agents.console_mirror import KEPT_LINES, console_mirror_refresh, mirror_of
from servers.agents.runtime import NodeRuntime
from servers.runtime import ConsoleLine, ConsoleLines
from tests.servers.agent_rig import wait_until


def lines_url(server, after=0):
    return f"/panel/servers/{server.id}/console/lines?after={after}"


def answer_console(agent, server, numbered_texts, last=None):
    lines = [{"n": n, "text": text} for n, text in numbered_texts]
    last = last if last is not None else max([0, *(n for n, _ in numbered_texts)])
    agent.answer("GET", f"/v1/servers/{server.id}/console", 200, {"lines": lines, "last": last})


def fetcher(server):
    """The agent runtime's own fetch of the server's console."""
    runtime = NodeRuntime()
    return lambda after: runtime._console(server, after)


def console_calls(agent, server):
    return [c for c in agent.calls("GET") if c.path.startswith(f"/v1/servers/{server.id}/console")]


def test_the_first_read_answers_at_once_and_fetches_in_the_background(
    alice_client, demo_server, stand_in_agent
):
    answer_console(stand_in_agent, demo_server, [(1, "Server started")])
    body = alice_client.get(lines_url(demo_server)).json()
    assert (body["lines"], body["last"], body["as_of"]) == ([], 0, None)
    wait_until(lambda: mirror_of(demo_server.id), 10, "the background fetch")
    body = alice_client.get(lines_url(demo_server)).json()
    assert body["lines"] == [{"n": 1, "text": "Server started"}]
    assert body["last"] == 1 and body["as_of"] is not None


def test_a_node_that_holds_the_call_never_holds_the_page(alice_client, demo_server, stand_in_agent):
    held, release = threading.Event(), threading.Event()

    def hold(request):
        if "/console" in request.path:
            held.set()
            release.wait(30)

    stand_in_agent.on_request = hold
    answer_console(stand_in_agent, demo_server, [(1, "late line")])
    alice_client.get(lines_url(demo_server))
    assert held.wait(10)
    # The node holds the fetch; the page is answered anyway, and starts no second fetch.
    assert alice_client.get(lines_url(demo_server)).status_code == 200
    assert len(console_calls(stand_in_agent, demo_server)) == 1
    release.set()
    wait_until(lambda: mirror_of(demo_server.id), 10, "the held fetch to end")
    assert alice_client.get(lines_url(demo_server)).json()["lines"][0]["text"] == "late line"


def test_a_fresh_mirror_is_read_without_a_fetch(alice_client, demo_server, stand_in_agent):
    answer_console(stand_in_agent, demo_server, [(1, "one")])
    with freeze_time("2026-11-27 10:00:00"):
        console_mirror_refresh(demo_server.id, fetcher(demo_server))
        calls = len(console_calls(stand_in_agent, demo_server))
        assert alice_client.get(lines_url(demo_server)).json()["age_seconds"] == 0
    assert len(console_calls(stand_in_agent, demo_server)) == calls


def test_a_silent_nodes_lines_are_shown_with_their_age(alice_client, demo_server, stand_in_agent):
    answer_console(stand_in_agent, demo_server, [(1, "one")])
    with freeze_time("2026-11-27 10:00:00"):
        console_mirror_refresh(demo_server.id, fetcher(demo_server))
    stand_in_agent.answer("GET", f"/v1/servers/{demo_server.id}/console", 500, {"error": {}})
    with freeze_time("2026-11-27 10:00:25"):
        body = alice_client.get(lines_url(demo_server)).json()
    assert body["lines"] == [{"n": 1, "text": "one"}]
    assert (body["as_of"], body["age_seconds"]) == ("2026-11-27T10:00:00.000Z", 25)


def test_an_unreachable_nodes_console_is_503_without_a_call(
    alice_client, demo_server, stand_in_agent
):
    demo_server.node.last_heartbeat_at = None
    demo_server.node.save(update_fields=["last_heartbeat_at"])
    response = alice_client.get(lines_url(demo_server))
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "node_unavailable"
    assert not stand_in_agent.calls()


# The mirror itself


def fetched(*numbered_texts, last=None):
    lines = [ConsoleLine(n, text) for n, text in numbered_texts]
    return lambda after: ConsoleLines(lines, last or max([after, *(n for n, _ in numbered_texts)]))


def test_a_refresh_asks_for_the_lines_after_the_mirrors_last(db):
    asked = []
    console_mirror_refresh("srv_a", fetched((1, "one"), (2, "two")))
    console_mirror_refresh("srv_a", lambda after: asked.append(after) or ConsoleLines([], after))
    assert asked == [2]


def test_a_refresh_adds_new_lines_and_keeps_the_newest(db):
    console_mirror_refresh("srv_a", fetched(*((n, f"line {n}") for n in range(1, KEPT_LINES + 1))))
    mirror = console_mirror_refresh("srv_a", fetched((KEPT_LINES + 1, "newest")))
    assert len(mirror.lines) == KEPT_LINES
    assert mirror.lines[0] == (2, "line 2") and mirror.lines[-1] == (KEPT_LINES + 1, "newest")
    assert mirror.last == KEPT_LINES + 1


def test_an_agent_that_numbers_its_lines_anew_replaces_the_mirror(db):
    console_mirror_refresh("srv_a", fetched((7, "old agent"), last=7))
    mirror = console_mirror_refresh("srv_a", fetched((1, "new agent"), last=1))
    assert (mirror.lines, mirror.last) == (((1, "new agent"),), 1)


def test_a_game_the_agent_never_ran_mirrors_no_lines(db):
    mirror = console_mirror_refresh("srv_a", lambda after: None)
    assert (mirror.lines, mirror.last) == ((), 0)


@pytest.mark.parametrize("after, expected", [(0, ["one", "two"]), (1, ["two"]), (2, [])])
def test_a_read_gives_the_mirrored_lines_after_the_one_asked_for(
    alice_client, demo_server, after, expected
):
    console_mirror_refresh(demo_server.id, fetched((1, "one"), (2, "two")))
    body = alice_client.get(lines_url(demo_server, after)).json()
    assert [line["text"] for line in body["lines"]] == expected
    assert body["last"] == 2
