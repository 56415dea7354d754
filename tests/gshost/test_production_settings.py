"""Production settings: no development SECRET_KEY outside DEBUG, security settings from the
environment, and `check --deploy --fail-level WARNING` clean with the README's settings."""

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.test import Client

from gshost.checks import (
    csrf_middleware_installed,
    webhook_allowed_networks_unset,
    webhook_secret_keys_set,
)

ROOT = Path(__file__).resolve().parents[2]
DEVELOPMENT_KEY = "django-insecure-gshost-development-only"
PRINT_SETTINGS = (
    "import json, django; django.setup(); from django.conf import settings as s; "
    "print(json.dumps({n: getattr(s, n) for n in ("
    "'SECURE_HSTS_SECONDS', 'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', "
    "'SECURE_PROXY_SSL_HEADER', 'SECURE_SSL_REDIRECT')}))"
)


def base_environment(**values: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "SECRET_KEY", "SECURE_", "WEBHOOK_", "DEBUG"))
    }
    env.update(DJANGO_SETTINGS_MODULE="gshost.settings", DATABASE_URL="", REDIS_URL="")
    env.update(values)
    return env


def python(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def production_settings() -> dict[str, str]:
    """The README's documented production settings, placeholders filled in."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(
        r"<!-- production-settings -->\n```sh\n(.*?)```\n<!-- /production-settings -->",
        readme,
        re.S,
    )
    assert block is not None, "README.md lost its production-settings block"
    fillers = {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "WEBHOOK_SECRET_KEYS": Fernet.generate_key().decode(),
    }
    values = {}
    for line in block.group(1).strip().splitlines():
        name, _, value = line.partition("=")
        values[name] = fillers.get(name) or value.replace("<password>", "pw")
    assert not any("<" in value for value in values.values()), values
    return values


def test_it_does_not_start_without_a_secret_key_outside_debug():
    done = python(base_environment(DEBUG="false"), "-c", "import django; django.setup()")
    assert done.returncode != 0
    assert "SECRET_KEY is not set" in done.stderr


def test_it_does_not_start_on_the_development_key_outside_debug():
    env = base_environment(DEBUG="false", SECRET_KEY=DEVELOPMENT_KEY)
    done = python(env, "-c", "import django; django.setup()")
    assert done.returncode != 0
    assert "SECRET_KEY" in done.stderr


def test_the_web_server_does_not_start_without_a_secret_key():
    done = python(base_environment(DEBUG="false"), "-c", "import gshost.wsgi")
    assert done.returncode != 0
    assert "SECRET_KEY is not set" in done.stderr


def test_it_starts_on_the_development_key_in_debug():
    done = python(base_environment(DEBUG="true"), "-c", "import django; django.setup()")
    assert done.returncode == 0, done.stderr


def test_security_settings_come_from_the_environment():
    env = base_environment(
        SECRET_KEY=secrets.token_urlsafe(50),
        SECURE_HSTS_SECONDS="31536000",
        SECURE_SSL_REDIRECT="true",
        SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO",
    )
    done = python(env, "-c", PRINT_SETTINGS)
    assert json.loads(done.stdout) == {
        "SECURE_HSTS_SECONDS": 31536000,
        "SESSION_COOKIE_SECURE": True,  # following SECURE_SSL_REDIRECT
        "CSRF_COOKIE_SECURE": True,
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
        "SECURE_SSL_REDIRECT": True,
    }


def test_check_deploy_passes_with_the_documented_production_settings():
    env = base_environment(**production_settings())
    done = python(env, "manage.py", "check", "--deploy", "--fail-level", "WARNING")
    assert done.returncode == 0, done.stdout + done.stderr


def test_check_deploy_warns_while_webhook_secret_keys_are_derived():
    settings = production_settings()
    del settings["WEBHOOK_SECRET_KEYS"]
    done = python(
        base_environment(**settings), "manage.py", "check", "--deploy", "--fail-level", "WARNING"
    )
    assert done.returncode != 0
    assert "gshost.W001" in done.stdout + done.stderr


def test_the_webhook_keys_check_is_quiet_once_they_are_set(settings):
    settings.WEBHOOK_SECRET_KEYS = [Fernet.generate_key().decode()]
    assert webhook_secret_keys_set(None) == []


def test_check_deploy_warns_while_webhook_allowed_networks_are_set():
    settings = {**production_settings(), "WEBHOOK_ALLOWED_NETWORKS": "10.0.0.0/8"}
    done = python(
        base_environment(**settings), "manage.py", "check", "--deploy", "--fail-level", "WARNING"
    )
    assert done.returncode != 0
    assert "gshost.W002" in done.stdout + done.stderr


def test_the_allowed_networks_check_is_quiet_with_debug_or_without_networks(settings):
    settings.DEBUG, settings.WEBHOOK_ALLOWED_NETWORKS = False, []
    assert webhook_allowed_networks_unset(None) == []
    settings.DEBUG, settings.WEBHOOK_ALLOWED_NETWORKS = True, ["127.0.0.0/8"]
    assert webhook_allowed_networks_unset(None) == []
    settings.DEBUG = False
    assert [w.id for w in webhook_allowed_networks_unset(None)] == ["gshost.W002"]


def test_it_warns_when_no_csrf_middleware_is_installed(settings):
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if "Csrf" not in m]
    assert [w.id for w in csrf_middleware_installed(None)] == ["gshost.W003"]


def test_the_panels_csrf_middleware_counts_as_installed():
    assert csrf_middleware_installed(None) == []


# Content-Security-Policy


def test_panel_pages_send_a_csp_without_inline_or_eval_scripts(client: Client, alice):
    client.force_login(alice.user)
    policy = client.get("/panel/keys/")["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";") if d.strip())
    script_src = directives.get("script-src", directives.get("default-src", ""))
    assert "'self'" in script_src
    assert "'unsafe-inline'" not in script_src and "'unsafe-eval'" not in script_src


def test_the_sign_in_and_admin_pages_send_the_csp(client: Client):
    for path in ("/accounts/login/", "/admin/login/"):
        assert "script-src 'self'" in client.get(path)["Content-Security-Policy"]


@pytest.mark.parametrize("template", sorted((ROOT / "templates").rglob("*.html")), ids=str)
def test_no_template_has_an_inline_script_or_handler(template: Path):
    html = template.read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "inline <script>"
    assert not re.search(r"\son[a-z]+\s*=", html), "inline event handler"
    assert "<style" not in html and "style=" not in html, "inline style"
