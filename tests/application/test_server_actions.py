"""Suspend, unsuspend, reinstall and delete through the Application API (on the simulated
node; with real agents, and a node down, in tests/servers/test_desired_state*)."""

from application.models import SoldServer
from servers.models import Server
from tests.application.conftest import Billing, error_code
from tests.application.test_servers import order


def test_suspend_and_unsuspend_answer_the_server_at_once(billing: Billing):
    server = billing.call("POST", "/servers", order(billing.customer())).json()

    suspended = billing.call("POST", f"/servers/{server['id']}/suspend")
    unsuspended = billing.call("POST", f"/servers/{server['id']}/unsuspend")

    assert suspended.status_code == 200 and suspended.json()["suspended"] is True
    assert unsuspended.status_code == 200 and unsuspended.json()["suspended"] is False


def test_a_deleted_server_is_not_found_and_its_external_id_free(billing: Billing):
    customer = billing.customer()
    server = billing.call("POST", "/servers", order(customer)).json()

    deleted = billing.call("DELETE", f"/servers/{server['id']}")
    after = billing.call("GET", f"/servers/{server['id']}")
    again = billing.call("POST", "/servers", order(customer))

    assert deleted.status_code == 204
    assert after.status_code == 404 and error_code(after) == "server_not_found"
    assert again.status_code == 201 and again.json()["id"] != server["id"]
    assert SoldServer.objects.filter(external_id="s-1").get().server_id == again.json()["id"]


def test_a_reinstall_is_recorded_at_once(billing: Billing):
    server = billing.call("POST", "/servers", order(billing.customer())).json()

    answer = billing.call("POST", f"/servers/{server['id']}/reinstall")

    assert answer.status_code == 200
    assert Server.objects.get(id=server["id"]).reinstall_requested_at is not None
