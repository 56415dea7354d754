"""What the second-factor tests share: a person's authenticator app (the RFC 6238 code of a
secret, made by django-otp's own `totp`), and enrolment and sign-in through the panel's forms."""

import base64
import re

from django.test import Client
from django_otp.oath import totp

LOGIN = "/accounts/login/"
SECOND_FACTOR = "/accounts/login/second-factor/"
SECURITY = "/accounts/security/"
TOTP_ADD = "/accounts/security/totp/"
RECOVERY_CODES = "/accounts/security/recovery-codes/"


def code_of(secret: str) -> str:
    """The code an authenticator app shows now for `secret` (base32, as the page shows it)."""
    key = base64.b32decode(secret + "=" * (-len(secret) % 8))
    return f"{totp(key):06d}"


def secret_on(page: str) -> str:
    found = re.search(r'<code id="totp-secret">([A-Z2-7]+)</code>', page)
    assert found, "the page shows no TOTP secret"
    return found.group(1)


def recovery_codes_on(page: str) -> list[str]:
    block = page.split('id="recovery-codes"', 1)[1].split("</ul>", 1)[0]
    return re.findall(r"<code>([a-z2-7]+)</code>", block)


def enrol_totp(client: Client) -> tuple[str, list[str]]:
    """Set up an authenticator app for the signed-in person; its secret and recovery codes."""
    secret = secret_on(client.get(TOTP_ADD).content.decode())
    confirmed = client.post(TOTP_ADD, {"code": code_of(secret)})
    assert confirmed.status_code == 302, confirmed.content.decode()
    codes = recovery_codes_on(client.get(confirmed["Location"]).content.decode())
    return secret, codes


def password_step(client: Client, email: str, password: str) -> None:
    response = client.post(LOGIN, {"username": email, "password": password})
    assert response["Location"] == SECOND_FACTOR, response


def is_signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session
