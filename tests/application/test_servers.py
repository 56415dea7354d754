"""Servers sold through the Application API: placed by the placement rule, one per external
id, changed only where a PATCH says."""

from typing import Any

from application.models import SoldServer
from servers.errors import NodeUnavailable
from servers.models import Server, ServerState
from tests.application.conftest import Billing, error_code, mint
from tests.servers.node_fixtures import online

LIMITS = {"memory_mb": 1024, "disk_mb": 2048, "cpu_percent": 100, "processes": 64}


def order(customer: dict[str, Any], external_id: str = "s-1", **fields: Any) -> dict[str, Any]:
    return {
        "external_id": external_id,
        "customer": customer["id"],
        "name": "Survival",
        "game": "minecraft",
        "limits": LIMITS,
        **fields,
    }


def test_a_server_is_created_on_the_node_placement_picks(billing: Billing):
    customer = billing.customer()

    answer = billing.call("POST", "/servers", order(customer))

    assert answer.status_code == 201
    server = answer.json()
    assert server["id"].startswith("srv_") and server["external_id"] == "s-1"
    assert server["customer"] == customer["id"] and server["limits"] == LIMITS
    assert (server["state"], server["suspended"], server["pending_restart"]) == (
        "stopped",
        False,
        False,
    )
    assert Server.objects.get(id=server["id"]).node.name == server["node"]


def test_a_server_takes_its_plans_limits_and_tags(billing: Billing):
    customer = billing.customer()
    online("eu-1", memory=8192, tags="eu", games=("minecraft",))
    plan = billing.call(
        "POST", "/plans", {"name": "Small", **LIMITS, "backups_limit": 2, "tags": ["eu"]}
    ).json()

    body = {**order(customer), "plan": plan["id"]}
    del body["limits"]

    answer = billing.call("POST", "/servers", body)

    assert answer.status_code == 201, answer.text
    assert answer.json()["plan"] == plan["id"] and answer.json()["node"] == "eu-1"


def test_a_server_keeps_as_many_backups_as_its_plan_and_any_number_without_one(
    billing: Billing,
):
    customer = billing.customer()
    plan = billing.call("POST", "/plans", {"name": "Small", **LIMITS, "backups_limit": 2}).json()
    body = {**order(customer), "plan": plan["id"]}
    del body["limits"]

    sold = billing.call("POST", "/servers", body).json()
    unplanned = billing.call("POST", "/servers", order(customer, external_id="s-2")).json()

    assert sold["backups_limit"] == 2 and unplanned["backups_limit"] is None
    assert Server.objects.get(id=sold["id"]).backups_limit == 2


def test_a_plan_given_again_brings_its_backups_limit(billing: Billing):
    customer = billing.customer()
    server = billing.call("POST", "/servers", order(customer)).json()
    plan = billing.call("POST", "/plans", {"name": "Big", **LIMITS, "backups_limit": 5}).json()

    answer = billing.call("PATCH", f"/servers/{server['id']}", {"plan": plan["id"]})

    assert answer.json()["backups_limit"] == 5
    assert Server.objects.get(id=server["id"]).backups_limit == 5


def test_the_same_create_again_answers_200_with_the_same_server(billing: Billing):
    customer = billing.customer()
    first = billing.call("POST", "/servers", order(customer)).json()

    again = billing.call("POST", "/servers", order(customer))

    assert again.status_code == 200 and again.json() == first
    assert Server.objects.count() == 1


def test_a_known_external_id_with_another_body_is_a_conflict(billing: Billing):
    customer = billing.customer()
    billing.call("POST", "/servers", order(customer))

    answer = billing.call("POST", "/servers", order(customer, name="Creative"))

    assert answer.status_code == 409 and error_code(answer) == "external_id_conflict"
    assert Server.objects.count() == 1


def test_external_ids_are_unique_per_integration_only(billing: Billing):
    customer = billing.customer()
    billing.call("POST", "/servers", order(customer))

    other = billing.call("POST", "/servers", order(customer), key=mint())

    assert other.status_code == 201 and Server.objects.count() == 2


def test_no_capacity_names_what_is_short_and_leaves_no_row(billing: Billing):
    customer = billing.customer()
    online("eu-1", memory=2048, tags="eu", games=("minecraft",))

    answer = billing.call(
        "POST", "/servers", order(customer, tags=["eu"], limits={**LIMITS, "memory_mb": 4096})
    )

    assert answer.status_code == 409 and error_code(answer) == "no_capacity"
    assert "memory is short on eu-1" in answer.json()["error"]["message"]
    assert not Server.objects.exists() and not SoldServer.objects.exists()


def test_a_lookup_by_external_id_is_exact(billing: Billing):
    customer = billing.customer()
    billing.call("POST", "/servers", order(customer, "s-1"))
    billing.call("POST", "/servers", order(customer, "s-10"))

    found = billing.call("GET", "/servers?external_id=s-1").json()["results"]

    assert [s["external_id"] for s in found] == ["s-1"]


def test_patch_changes_only_what_it_sends(billing: Billing):
    customer = billing.customer()
    server = billing.call("POST", "/servers", order(customer)).json()

    answer = billing.call("PATCH", f"/servers/{server['id']}", {"name": "Renamed"})

    assert answer.status_code == 200
    assert answer.json() == {**server, "name": "Renamed"}


def test_new_limits_wait_for_the_next_start_of_a_running_game(billing: Billing):
    customer = billing.customer()
    server = billing.call("POST", "/servers", order(customer)).json()
    Server.objects.filter(id=server["id"]).update(state=ServerState.RUNNING)

    answer = billing.call(
        "PATCH", f"/servers/{server['id']}", {"limits": {**LIMITS, "memory_mb": 2048}}
    )

    assert answer.json()["limits"]["memory_mb"] == 2048
    assert answer.json()["pending_restart"] is True
    assert Server.objects.get(id=server["id"]).memory_mb == 2048


def test_new_limits_of_a_stopped_server_are_pending_until_its_next_start(billing: Billing):
    customer = billing.customer()
    server = billing.call("POST", "/servers", order(customer)).json()
    assert server["pending_restart"] is False

    answer = billing.call(
        "PATCH", f"/servers/{server['id']}", {"limits": {**LIMITS, "memory_mb": 2048}}
    )

    assert (answer.json()["state"], answer.json()["pending_restart"]) == ("stopped", True)


def test_a_create_whose_first_start_the_node_does_not_take_still_makes_the_server(
    billing: Billing, monkeypatch
):
    def unavailable(**_: Any) -> None:
        raise NodeUnavailable("node-1")

    monkeypatch.setattr("application.sold_servers.server_power", unavailable)
    customer = billing.customer()

    answer = billing.call("POST", "/servers", order(customer, start=True))

    assert answer.status_code == 201
    assert answer.json()["state"] == "stopped"
    assert billing.call("POST", "/servers", order(customer, start=True)).status_code == 200


def test_a_server_of_an_unknown_customer_is_not_found(billing: Billing):
    answer = billing.call("POST", "/servers", order({"id": "org_nobody"}))

    assert answer.status_code == 404 and error_code(answer) == "not_found"


def test_plan_and_limits_together_are_invalid(billing: Billing):
    customer = billing.customer()

    answer = billing.call("POST", "/servers", order(customer, plan="pln_x"))

    assert answer.status_code == 400 and "plan" in answer.json()["error"]["fields"]


def test_a_plan_its_node_cannot_hold_is_no_capacity_and_changes_nothing(billing: Billing):
    customer = billing.customer()
    online("eu-1", memory=2048, tags="eu", games=("minecraft",))
    server = billing.call("POST", "/servers", order(customer, tags=["eu"])).json()

    answer = billing.call(
        "PATCH", f"/servers/{server['id']}", {"limits": {**LIMITS, "memory_mb": 4096}}
    )

    assert answer.status_code == 409 and error_code(answer) == "no_capacity"
    assert "memory is short on eu-1" in answer.json()["error"]["message"]
    assert Server.objects.get(id=server["id"]).memory_mb == LIMITS["memory_mb"]


def test_an_id_no_server_can_have_is_not_found(billing: Billing):
    answer = billing.call("GET", "/servers/srv_%00nul")

    assert answer.status_code == 404 and error_code(answer) == "server_not_found"


def test_a_server_created_with_start_is_started(billing: Billing):
    answer = billing.call("POST", "/servers", order(billing.customer(), start=True))

    assert answer.status_code == 201 and answer.json()["state"] in ("starting", "running")


def test_a_body_that_is_not_a_json_object_is_invalid_request(billing: Billing):
    answer = billing.call("POST", "/servers", ["not", "an", "object"])

    assert answer.status_code == 400 and error_code(answer) == "invalid_request"


def test_a_server_is_created_with_its_game_settings(billing: Billing):
    answer = billing.call("POST", "/servers", order(billing.customer(), settings={"motd": "Hi"}))

    assert answer.status_code == 201
    assert Server.objects.get(id=answer.json()["id"]).desired_settings["motd"] == "Hi"


def test_an_unknown_game_setting_is_refused_and_leaves_no_server(billing: Billing):
    answer = billing.call("POST", "/servers", order(billing.customer(), settings={"nope": "1"}))

    assert answer.status_code == 400 and error_code(answer) == "invalid_request"
    assert not Server.objects.exists()


def test_a_create_without_an_external_id_or_a_game_is_invalid(billing: Billing):
    customer = billing.customer()
    for missing in ("external_id", "game"):
        body = {k: v for k, v in order(customer).items() if k != missing}
        answer = billing.call("POST", "/servers", body)
        assert (answer.status_code, error_code(answer)) == (400, "invalid_request"), missing
    assert Server.objects.count() == 0
