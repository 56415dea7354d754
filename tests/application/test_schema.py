"""The Application API has an OpenAPI schema of its own, and a docs page; the Customer API's
schema does not list its routes."""

from django.test import Client

from application.api.schema import PREFIX
from tests.application.conftest import error_code, mint


def test_the_schema_lists_the_application_routes_only(db):
    schema = Client().get(f"{PREFIX}/schema/?format=json").json()

    assert schema["info"]["title"] == "gshost Application API"
    assert {"/customers", "/servers/{server_id}/suspend", "/nodes"} <= {
        path.removeprefix(PREFIX) for path in schema["paths"]
    }
    assert all(path.startswith(PREFIX) for path in schema["paths"])


def test_the_customer_api_schema_leaves_the_application_routes_out(db):
    schema = Client().get("/api/public/v1/schema/?format=json").json()

    assert not [path for path in schema["paths"] if "/application/" in path]


def test_the_docs_page_is_served(db):
    assert Client().get(f"{PREFIX}/docs/").status_code == 200


def test_an_unknown_route_is_not_found_in_the_envelope(db):
    answer = Client().get(f"{PREFIX}/nothing-here", HTTP_AUTHORIZATION=f"Bearer {mint()}")

    assert answer.status_code == 404 and error_code(answer) == "not_found"
