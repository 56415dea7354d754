"""The error envelope, request ids and the missing-token / unknown-route / method answers.

Body parsing and unhandled errors are exercised through two tiny views registered under the
API prefix by this module, which doubles as the urlconf of the tests marked with it.
"""

import re

import pytest
from django.urls import include, path
from freezegun import freeze_time
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import keys
from accounts.models import ApiKey
from accounts.permissions import NO_SCOPE_REQUIRED
from accounts.services import api_key_revoke
from audit.actors import Actor
from audit.models import AuditRecord
from tests.conftest import API, client_for, error_of

TEST_ACTOR = Actor.system("tests")  # not a panel action: it writes no audit row


CURRENT = f"{API}/account/keys/current"


class EchoInput(serializers.Serializer):
    name = serializers.CharField()
    count = serializers.IntegerField(required=False)


class EchoView(APIView):
    scopes = {"POST": NO_SCOPE_REQUIRED}

    def post(self, request: Request) -> Response:
        data = EchoInput(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(data.validated_data)


class BoomView(APIView):
    scopes = {"GET": NO_SCOPE_REQUIRED}

    def get(self, request: Request) -> Response:
        raise RuntimeError("a bug with a secret in it: hunter2")


urlpatterns = [
    path("api/public/v1/test/echo", EchoView.as_view()),
    path("api/public/v1/test/boom", BoomView.as_view()),
    path("", include("gshost.urls")),
]

with_test_views = pytest.mark.urls(__name__)


def post_raw(key, body: str, content_type: str = "application/json"):
    return client_for(key).generic(
        "POST", f"{API}/test/echo", body.encode(), content_type=content_type
    )


# Bodies


@with_test_views
def test_a_json_object_body_is_parsed(make_key):
    response = post_raw(make_key(), '{"name": "world"}')
    assert response.status_code == 200
    assert response.json() == {"name": "world"}


@with_test_views
@pytest.mark.parametrize("body", ["not json", '{"name": ', "{'name': 'x'}", "\x00"])
def test_a_body_that_is_not_json_is_invalid_request(make_key, body):
    response = post_raw(make_key(), body)
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"


@with_test_views
@pytest.mark.parametrize("body", ['[{"name": "x"}]', '"name"', "42", "null", "true"])
def test_a_json_body_that_is_not_an_object_is_invalid_request(make_key, body):
    response = post_raw(make_key(), body)
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"


@with_test_views
def test_absurdly_deep_json_is_invalid_request_not_a_server_error(make_key):
    response = post_raw(make_key(), "[" * 100_000 + "]" * 100_000)
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"


@with_test_views
def test_a_body_with_bytes_after_the_object_is_invalid_request(make_key):
    response = post_raw(make_key(), '{"name": "x"} trailing')
    assert response.status_code == 400
    assert error_of(response)["code"] == "invalid_request"


@with_test_views
def test_a_missing_required_field_is_invalid_request_naming_the_field(make_key):
    response = post_raw(make_key(), '{"count": 1}')
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_request"
    assert list(error["fields"]) == ["name"]
    assert all(isinstance(m, str) for m in error["fields"]["name"])


@with_test_views
def test_a_field_of_the_wrong_type_is_invalid_request_naming_the_field(make_key):
    response = post_raw(make_key(), '{"name": "x", "count": "many"}')
    assert response.status_code == 400
    assert list(error_of(response)["fields"]) == ["count"]


@with_test_views
def test_a_body_is_read_only_after_authentication(db):
    response = post_raw(None, "not json")
    assert response.status_code == 401
    assert error_of(response)["code"] == "missing_token"


# Unhandled errors


@with_test_views
def test_an_unhandled_exception_answers_500_in_the_envelope(make_key):
    response = client_for(make_key()).get(f"{API}/test/boom")
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert error_of(response)["code"] == "internal_error"


@with_test_views
def test_a_500_reveals_nothing_of_the_exception(make_key):
    response = client_for(make_key()).get(f"{API}/test/boom")
    assert b"hunter2" not in response.content
    assert b"RuntimeError" not in response.content


@with_test_views
def test_a_500_carries_a_request_id_and_is_audited(make_key):
    key = make_key()
    response = client_for(key).get(f"{API}/test/boom")
    assert response["X-Request-Id"]
    row = AuditRecord.objects.get(actor_key_id=key.key_id)
    assert (row.status_code, row.error_code) == (500, "internal_error")


@with_test_views
def test_a_500_is_logged_with_its_traceback(make_key, caplog):
    client_for(make_key()).get(f"{API}/test/boom")
    assert any(r.exc_info and r.exc_info[0] is RuntimeError for r in caplog.records)


# Missing token


@pytest.mark.parametrize(
    "header",
    [None, "", "Basic YWxpY2U6c2VjcmV0", "Bearer", "Bearer   ", "Token abc", "gsk_abc"],
    ids=["absent", "empty", "basic", "bearer-alone", "bearer-blank", "token", "bare-key"],
)
def test_no_bearer_token_is_missing_token(db, header):
    client = client_for(None)
    if header is not None:
        client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get(CURRENT)
    assert response.status_code == 401
    assert error_of(response)["code"] == "missing_token"


def test_the_bearer_scheme_is_case_insensitive(make_key):
    key = make_key()
    client = client_for(None)
    client.credentials(HTTP_AUTHORIZATION=f"bearer {key.full_key}")
    assert client.get(CURRENT).status_code == 200


def well_formed_token(key_id: str) -> str:
    body = f"gsk_{key_id}_{'W' * 37}"
    return body + keys.checksum(body)


def test_every_401_carries_www_authenticate(make_key):
    with freeze_time("2026-11-22 10:00:00") as frozen:
        expired = make_key(expiry_days=1)
        revoked = make_key()
        api_key_revoke(key=ApiKey.objects.get(key_id=revoked.key_id), actor=TEST_ACTOR)
        frozen.tick(86400)
        answers = {
            "missing_token": client_for(None).get(CURRENT),
            "invalid_token": client_for(well_formed_token(revoked.key_id)).get(CURRENT),
            "token_expired": client_for(expired).get(CURRENT),
            "token_revoked": client_for(revoked).get(CURRENT),
        }
    for code, response in answers.items():
        assert (response.status_code, error_of(response)["code"]) == (401, code)
        assert response["WWW-Authenticate"] == 'Bearer error="invalid_token"', code


# Unknown routes and methods


def test_an_unknown_route_under_the_prefix_is_not_found(make_key):
    response = client_for(make_key()).get(f"{API}/no/such/route")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_an_unknown_route_still_needs_a_key(db):
    response = client_for(None).get(f"{API}/no/such/route")
    assert response.status_code == 401
    assert error_of(response)["code"] == "missing_token"


def test_a_call_to_an_unknown_route_is_audited(make_key):
    key = make_key()
    client_for(key).post(f"{API}/no/such/route")
    row = AuditRecord.objects.get(actor_key_id=key.key_id)
    assert (row.method, row.path) == ("POST", f"{API}/no/such/route")
    assert (row.status_code, row.error_code) == (404, "not_found")


@pytest.mark.parametrize(
    ("method", "route"),
    [("post", "/account/keys"), ("put", "/account/keys/current"), ("get", "/account/keys/x")],
)
def test_a_method_the_route_does_not_take_is_method_not_allowed(make_key, method, route):
    response = getattr(client_for(make_key(["keys:read"])), method)(f"{API}{route}")
    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"


def test_a_405_names_the_allowed_methods(make_key):
    response = client_for(make_key()).post(f"{API}/account/keys/current")
    assert "GET" in response["Allow"]


def test_options_is_method_not_allowed_and_not_listed_in_allow(make_key):
    response = client_for(make_key(["keys:read"])).options(f"{API}/account/keys")
    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"
    assert "OPTIONS" not in response["Allow"]
    assert "GET" in response["Allow"]


def test_no_api_response_lists_options_in_allow(make_key):
    response = client_for(make_key(["keys:read"])).get(f"{API}/account/keys")
    assert response.status_code == 200
    assert "OPTIONS" not in response.get("Allow", "")


# The envelope


def test_errors_are_json_with_only_code_and_message_unless_listed(db):
    response = client_for(None).get(CURRENT)
    assert response["Content-Type"] == "application/json"
    assert set(error_of(response)) == {"code", "message"}
    assert error_of(response)["message"]


# Request ids


def test_a_valid_incoming_request_id_is_echoed(make_key):
    response = client_for(make_key()).get(CURRENT, HTTP_X_REQUEST_ID="client-req.42:a_b")
    assert response["X-Request-Id"] == "client-req.42:a_b"


@pytest.mark.parametrize(
    "incoming", ["", "has spaces", "x" * 129, "semi;colon", "new\nline"], ids=repr
)
def test_an_invalid_incoming_request_id_is_replaced(make_key, incoming):
    response = client_for(make_key()).get(CURRENT, HTTP_X_REQUEST_ID=incoming)
    assert response["X-Request-Id"] != incoming
    assert re.fullmatch(r"[A-Za-z0-9._:\-]{1,128}", response["X-Request-Id"])


def test_a_request_id_is_generated_when_none_is_sent(make_key):
    client = client_for(make_key())
    first, second = client.get(CURRENT), client.get(CURRENT)
    assert first["X-Request-Id"] and second["X-Request-Id"]
    assert first["X-Request-Id"] != second["X-Request-Id"]


def test_error_responses_carry_a_request_id_too(db):
    response = client_for(None).get(CURRENT, HTTP_X_REQUEST_ID="abc-123")
    assert response.status_code == 401
    assert response["X-Request-Id"] == "abc-123"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query", ["limit=1&limit=2", "limit=1&limit=1", "limit=1&cursor=a&cursor=b"]
)
def test_a_query_parameter_given_twice_is_invalid_request_naming_it(make_key, query):
    response = client_for(make_key(["servers:read"])).get(f"{API}/servers?{query}")
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "invalid_request"
    assert list(error["fields"]) == [query.rsplit("&", 1)[1].split("=")[0]]


@pytest.mark.django_db
def test_a_query_parameter_given_twice_is_invalid_request_on_a_route_without_parameters(make_key):
    response = client_for(make_key()).get(f"{CURRENT}?x=1&x=2")
    assert response.status_code == 400
    assert error_of(response)["fields"] == {"x": ["Given more than once: give it once."]}
