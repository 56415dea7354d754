"""Signing in to the panel with an email address and a password."""

from django.test import Client

LOGIN = "/accounts/login/"


def test_it_shows_the_login_form(client):
    page = client.get(LOGIN).content.decode()
    assert 'name="username"' in page
    assert 'name="password"' in page
    assert "csrfmiddlewaretoken" in page


def test_it_signs_in_with_email_and_password(client, alice):
    response = client.post(LOGIN, {"username": "alice@acme.test", "password": "alice-pw-123"})
    assert response.status_code == 302
    assert response["Location"] == "/panel/keys/"
    assert client.get("/panel/keys/").status_code == 200


def test_it_signs_in_whatever_the_case_of_the_email(client, alice):
    response = client.post(LOGIN, {"username": " Alice@ACME.test", "password": "alice-pw-123"})
    assert response.status_code == 302


def test_it_refuses_a_wrong_password(client, alice):
    response = client.post(LOGIN, {"username": "alice@acme.test", "password": "wrong"})
    assert response.status_code == 200
    assert "correct email and password" in response.content.decode()
    assert client.get("/panel/keys/").status_code == 302


def test_it_works_with_csrf_checks_on(alice):
    client = Client(enforce_csrf_checks=True)
    page = client.get(LOGIN)
    token = page.cookies["csrftoken"].value
    response = client.post(
        LOGIN,
        {"username": "alice@acme.test", "password": "alice-pw-123", "csrfmiddlewaretoken": token},
    )
    assert response.status_code == 302


def test_it_returns_to_the_page_asked_for(client, alice):
    response = client.post(
        f"{LOGIN}?next=/panel/audit/",
        {"username": "alice@acme.test", "password": "alice-pw-123", "next": "/panel/audit/"},
    )
    assert response["Location"] == "/panel/audit/"


def test_it_signs_out_with_a_post(client, alice):
    client.force_login(alice.user)
    response = client.post("/accounts/logout/")
    assert response.status_code == 302
    assert client.get("/panel/keys/").status_code == 302
