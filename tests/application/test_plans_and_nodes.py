"""Plans (what a billing system sells) and nodes (where servers can go, with their room)."""

from urllib.parse import parse_qs, urlsplit

from tests.application.conftest import Billing, error_code
from tests.application.test_servers import LIMITS, order
from tests.servers.node_fixtures import online

PLAN = {"name": "Small", **LIMITS, "backups_limit": 2, "tags": ["eu"]}


def test_a_plan_is_created_read_changed_and_deleted(billing: Billing):
    created = billing.call("POST", "/plans", PLAN)
    plan_id = created.json()["id"]

    listed = billing.call("GET", "/plans").json()["results"]
    changed = billing.call("PATCH", f"/plans/{plan_id}", {"memory_mb": 2048})
    deleted = billing.call("DELETE", f"/plans/{plan_id}")

    assert created.status_code == 201 and plan_id.startswith("pln_")
    assert created.json() == {"id": plan_id, **PLAN}
    assert [p["id"] for p in listed] == [plan_id]
    assert changed.json() == {"id": plan_id, **PLAN, "memory_mb": 2048}
    assert deleted.status_code == 204
    assert billing.call("GET", f"/plans/{plan_id}").status_code == 404


def test_a_plan_given_to_a_server_cannot_be_deleted(billing: Billing):
    plan = billing.call("POST", "/plans", {**PLAN, "tags": []}).json()
    body = {**order(billing.customer()), "plan": plan["id"]}
    del body["limits"]
    billing.call("POST", "/servers", body)

    answer = billing.call("DELETE", f"/plans/{plan['id']}")

    assert answer.status_code == 409 and error_code(answer) == "plan_in_use"


def test_a_limit_out_of_bounds_is_invalid_request_naming_it(billing: Billing):
    answer = billing.call("POST", "/plans", {**PLAN, "memory_mb": 1})

    assert answer.status_code == 400 and set(answer.json()["error"]["fields"]) == {"memory_mb"}


def test_a_field_the_route_does_not_know_is_refused(billing: Billing):
    customer = billing.customer()

    answer = billing.call("PATCH", f"/customers/{customer['id']}", {"owner": {"email": "x@y.z"}})

    assert answer.status_code == 400 and error_code(answer) == "invalid_request"
    assert "owner" in answer.json()["error"]["fields"]


def test_nodes_show_their_room(billing: Billing):
    online("eu-1", memory=4096, disk=10240, tags="eu", games=("minecraft",))
    billing.call("POST", "/servers", order(billing.customer(), tags=["eu"]))

    nodes = {n["name"]: n for n in billing.call("GET", "/nodes").json()["results"]}

    node = nodes["eu-1"]
    assert (node["state"], node["tags"], node["games"], node["servers"]) == (
        "online",
        ["eu"],
        ["minecraft"],
        1,
    )
    assert node["capacity"]["memory_mb"] == 4096 and node["committed"]["memory_mb"] == 1024
    assert node["free"] == {"memory_mb": 3072, "disk_mb": 8192, "ports": 99}


def test_nodes_come_a_page_at_a_time_newest_first(billing: Billing):
    for name in ("eu-1", "eu-2", "eu-3"):
        online(name)

    first = billing.call("GET", "/nodes?limit=2").json()
    cursor = parse_qs(urlsplit(first["next"]).query)["cursor"][0]
    second = billing.call("GET", "/nodes", params={"limit": "2", "cursor": cursor}).json()

    named = [n["name"] for n in first["results"] + second["results"]]
    assert named[:3] == ["eu-3", "eu-2", "eu-1"]
    assert len(first["results"]) == 2 and first["previous"] is None
