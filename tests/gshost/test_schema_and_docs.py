"""The OpenAPI schema and the human docs are public, complete, and load nothing from a CDN."""

import re

import pytest

from tests.conftest import API

pytestmark = pytest.mark.django_db


def test_it_serves_the_openapi_schema_without_a_key(client):
    response = client.get(f"{API}/schema/?format=json")
    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")


def test_it_documents_every_public_route(client):
    paths = client.get(f"{API}/schema/?format=json").json()["paths"]
    for route in [
        "/account/keys/current",
        "/account/keys",
        "/account/keys/{key_id}",
        "/account/audit",
        "/keys/report-leaked",
        "/webhooks",
        "/webhooks/{webhook_id}/deliveries/redeliver",
        "/servers/{server_id}/realtime-stats",
        "/jobs/{job_id}",
    ]:
        assert f"{API}{route}" in paths


def test_it_describes_the_bearer_key_scheme(client):
    schema = client.get(f"{API}/schema/?format=json").json()
    scheme = schema["components"]["securitySchemes"]["ApiKey"]
    assert scheme == {**scheme, "type": "http", "scheme": "bearer"}


def test_it_serves_the_docs_page_with_local_assets_only(client):
    page = client.get(f"{API}/docs/")
    assert page.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.content.decode())
    assert sources, "the docs page loads its assets"
    assert all(not s.startswith(("http://", "https://", "//")) for s in sources), sources


def _operations(client):
    schema = client.get(f"{API}/schema/?format=json").json()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            yield path.removeprefix(API), method, operation


def _error_codes(operation, status):
    schema = operation["responses"][status]["content"]["application/json"]["schema"]
    assert schema["allOf"][0] == {"$ref": "#/components/schemas/Error"}
    return schema["allOf"][1]["properties"]["error"]["properties"]["code"]["enum"]


# Routes anyone may call, without a key: documented without security and without a 401.
OPEN_OPERATIONS = {("post", "/keys/report-leaked")}


def test_it_documents_the_error_envelope_on_every_operation(client):
    for path, method, operation in _operations(client):
        assert "rate_limited" in _error_codes(operation, "429")
        if (method, path) in OPEN_OPERATIONS:
            continue
        assert "401" in operation["responses"], (method, path)
        assert "missing_token" in _error_codes(operation, "401")


def test_it_documents_a_repeated_query_parameter_and_a_long_request_line_on_every_operation(
    client,
):
    for path, method, operation in _operations(client):
        assert "invalid_request" in _error_codes(operation, "400"), (method, path)
        assert "414" in operation["responses"], (method, path)


def test_it_documents_the_leak_report_as_open_to_anyone(client):
    operations = {(m, p): op for p, m, op in _operations(client)}
    for key in OPEN_OPERATIONS:
        operation = operations[key]
        assert not operation.get("security"), key
        assert "401" not in operation["responses"], key
    ok = operations["post", "/keys/report-leaked"]["responses"]["202"]
    assert ok["content"]["application/json"]["schema"]["$ref"].endswith("/LeakReportReceipt")


def test_it_documents_server_not_found_on_every_server_route(client):
    for path, method, operation in _operations(client):
        if "{server_id}" in path:
            assert "server_not_found" in _error_codes(operation, "404"), (method, path)


def test_it_documents_server_suspended_on_every_action_on_a_server(client):
    for path, method, operation in _operations(client):
        if "/{server_id}/" in path and method in {"post", "put", "patch", "delete"}:
            assert "server_suspended" in _error_codes(operation, "409"), (method, path)


def test_it_documents_payload_too_large_on_every_operation_with_a_body(client):
    for path, method, operation in _operations(client):
        if method in {"post", "patch"}:
            assert _error_codes(operation, "413") == ["payload_too_large"], (method, path)


def test_it_documents_the_webhook_registration_refusals(client):
    operations = {(m, p): op for p, m, op in _operations(client)}
    codes = _error_codes(operations["post", "/webhooks"], "422")
    assert {"invalid_webhook_url", "unknown_event"} <= set(codes)


def test_it_documents_every_list_as_a_page_with_its_limit_and_cursor(client):
    lists = [
        "/account/keys",
        "/account/audit",
        "/servers",
        "/webhooks",
        "/servers/{server_id}/backups",
        "/servers/{server_id}/schedules",
        "/servers/{server_id}/settings/history",
        "/webhooks/{webhook_id}/deliveries",
    ]
    schema = client.get(f"{API}/schema/?format=json").json()
    for route in lists:
        operation = schema["paths"][f"{API}{route}"]["get"]
        ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
        if "$ref" in ok:
            ok = schema["components"]["schemas"][ok["$ref"].split("/")[-1]]
        assert set(ok["properties"]) == {"results", "next", "previous"}, route
        (limit,) = [p for p in operation["parameters"] if p["name"] == "limit"]
        # A larger limit is treated as 100 (the description says so), not refused.
        assert limit["schema"] == {"type": "integer", "minimum": 1}, route
        assert "treated as 100" in limit["description"], route
        (cursor,) = [p for p in operation["parameters"] if p["name"] == "cursor"]
        assert cursor["schema"] == {
            "type": "string",
            "minLength": 18,
            "maxLength": 57,
            "pattern": "^[np][0-9]{16}[A-Za-z0-9_]{1,40}$",
        }, route


def test_it_documents_self_revocation_as_the_revoked_key_record(client):
    operation = client.get(f"{API}/schema/?format=json").json()["paths"][
        f"{API}/account/keys/{{key_id}}"
    ]["delete"]
    assert "204" not in operation["responses"]
    ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/KeyRecord"}


def test_it_requires_at_least_one_event_in_the_schema(client):
    schemas = client.get(f"{API}/schema/?format=json").json()["components"]["schemas"]
    assert schemas["WebhookCreateInputRequest"]["properties"]["events"]["minItems"] == 1
