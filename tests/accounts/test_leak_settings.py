"""The leaked-key settings: SECRET_SCANNING_KEYS_URL and LEAK_REPORT_RATE, read at start-up."""

import secrets

from tests.gshost.test_production_settings import base_environment, python

PRINT = (
    "import django; django.setup(); from django.conf import settings as s; "
    "print(s.SECRET_SCANNING_KEYS_URL, s.LEAK_REPORT_RATE)"
)


def start(**values: str):
    env = base_environment(SECRET_KEY=secrets.token_urlsafe(50))
    for name in ("SECRET_SCANNING_KEYS_URL", "LEAK_REPORT_RATE"):
        env.pop(name, None)  # from the environment the tests run in
    return python({**env, **values}, "-c", PRINT)


def test_the_defaults_are_githubs_keys_and_ten_a_minute():
    done = start()
    assert done.stdout.split() == [
        "https://api.github.com/meta/public_keys/secret_scanning",
        "10/min",
    ]


def test_an_empty_keys_url_means_githubs():
    done = start(SECRET_SCANNING_KEYS_URL="")
    assert done.stdout.split()[0] == "https://api.github.com/meta/public_keys/secret_scanning"


def test_any_http_url_is_accepted_for_the_keys():
    done = start(
        SECRET_SCANNING_KEYS_URL="http://10.0.0.5:8080/keys.json", LEAK_REPORT_RATE="3/min"
    )
    assert done.stdout.split() == ["http://10.0.0.5:8080/keys.json", "3/min"]


def test_it_does_not_start_with_keys_url_that_is_not_http():
    done = start(SECRET_SCANNING_KEYS_URL="file:///etc/keys.json")
    assert done.returncode != 0
    assert "SECRET_SCANNING_KEYS_URL must be an http(s) URL" in done.stderr


def test_it_does_not_start_with_a_report_rate_it_cannot_enforce():
    done = start(LEAK_REPORT_RATE="ten")
    assert done.returncode != 0
    assert "LEAK_REPORT_RATE" in done.stderr
