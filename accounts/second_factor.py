"""A person's second factors: an authenticator app (TOTP), recovery codes, passkeys.

TOTP devices and recovery codes are django-otp's (`otp_totp`, `otp_static`); passkeys are
`accounts.passkeys`. Every code a person types goes through `code_check`: it refuses while the
sign-in throttle holds the account or address, counts a wrong code as a failed sign-in (so
codes share the password's limits), refuses a TOTP code already used in its window
(django-otp keeps the last time step used; the device row is locked while checking, so two
requests cannot both use one code), and consumes a recovery code with one DELETE (only a keyed
hash of each recovery code is stored).
"""

import base64
import re
from dataclasses import dataclass
from enum import StrEnum

import segno
from axes.handlers.proxy import AxesProxyHandler
from django.contrib.auth.signals import user_login_failed
from django.db import transaction
from django.http import HttpRequest
from django.utils.crypto import salted_hmac
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts.errors import CodeRefused, FactorNotFound, SignInLocked
from accounts.models import Passkey, User
from accounts.panel_sessions import EndReason, person_sessions_end
from accounts.person_audit import audit_person_action
from audit.services import PanelAction, PanelContext

RECOVERY_CODE_COUNT = 10
TOTP_NAME = "Authenticator app"
RECOVERY_NAME = "Recovery codes"
RECOVERY_SALT = "accounts.second_factor.recovery_code"
_NOT_CODE_CHARACTERS = re.compile(r"[\s-]+")


class Method(StrEnum):
    """How a person proved the second factor."""

    TOTP = "totp"
    RECOVERY_CODE = "recovery code"
    PASSKEY = "passkey"


@dataclass(frozen=True)
class Factors:
    """What Account -> Security shows of a person's factors."""

    totp: bool
    passkeys: list[Passkey]
    recovery_codes_left: int

    @property
    def any(self) -> bool:
        return self.totp or bool(self.passkeys)


def factors_of(user: User) -> Factors:
    return Factors(
        totp=TOTPDevice.objects.filter(user=user, confirmed=True).exists(),
        passkeys=list(Passkey.objects.filter(user=user).order_by("created_at", "id")),
        recovery_codes_left=StaticToken.objects.filter(device__user=user).count(),
    )


def has_second_factor(user: User) -> bool:
    return (
        TOTPDevice.objects.filter(user=user, confirmed=True).exists()
        or Passkey.objects.filter(user=user).exists()
    )


# --- Adding an authenticator app ---


def totp_enrolment_start(user: User) -> TOTPDevice:
    """The person's unconfirmed TOTP device (a new secret the first time)."""
    device = TOTPDevice.objects.filter(user=user, confirmed=False).first()
    return device or TOTPDevice.objects.create(user=user, name=TOTP_NAME, confirmed=False)


def totp_secret(device: TOTPDevice) -> str:
    """The secret as an authenticator app takes it typed in (base32)."""
    return base64.b32encode(device.bin_key).decode("ascii").rstrip("=")


def totp_qr_svg(device: TOTPDevice) -> str:
    """The otpauth:// URL as an inline SVG QR code, made here (no outside service sees it)."""
    svg: str = segno.make(device.config_url, error="m").svg_inline(scale=5, border=2)
    return svg


def totp_enrolment_confirm(*, user: User, code: str, context: PanelContext) -> list[str]:
    """Confirm the pending device with its first code. Returns the new recovery codes when the
    person had none (shown once), else an empty list."""
    with transaction.atomic():
        device = TOTPDevice.objects.select_for_update().filter(user=user, confirmed=False).first()
        if device is not None and device.verify_token(_normalised(code)):
            device.confirmed = True
            device.save(update_fields=["confirmed"])
            audit_person_action(user=user, context=context, action=PanelAction.MFA_TOTP_ADD)
            return recovery_codes_first(user=user, context=context)
    audit_person_action(
        user=user, context=context, action=PanelAction.MFA_CODE_FAIL, status_code=400
    )
    raise CodeRefused()


# --- Recovery codes ---


def recovery_codes_create(*, user: User, context: PanelContext) -> list[str]:
    """Ten new single-use codes; the old ones stop working."""
    with transaction.atomic():
        device, _ = StaticDevice.objects.get_or_create(
            user=user, defaults={"name": RECOVERY_NAME, "confirmed": True}
        )
        device.token_set.all().delete()
        codes = [StaticToken.random_token() for _ in range(RECOVERY_CODE_COUNT)]
        StaticToken.objects.bulk_create(
            [StaticToken(device=device, token=_stored_form(code)) for code in codes]
        )
        audit_person_action(
            user=user, context=context, action=PanelAction.MFA_RECOVERY_CODES_CREATE
        )
    return codes


def recovery_codes_first(*, user: User, context: PanelContext) -> list[str]:
    """New recovery codes if the person has none left (a first factor was just added)."""
    if StaticToken.objects.filter(device__user=user).exists():
        return []
    return recovery_codes_create(user=user, context=context)


# --- Checking a code ---


def _normalised(code: str) -> str:
    return _NOT_CODE_CHARACTERS.sub("", code).lower()


def _credentials(user: User) -> dict[str, str]:
    return {"username": user.email}


def sign_in_locked(request: HttpRequest, user: User) -> bool:
    """Whether the sign-in throttle refuses this account from this address now."""
    return bool(AxesProxyHandler.is_locked(request, _credentials(user)))


def _totp_matches(user: User, code: str) -> bool:
    if not code.isdigit():
        return False
    with transaction.atomic():
        devices = TOTPDevice.objects.select_for_update().filter(user=user, confirmed=True)
        return any(device.verify_token(code) for device in devices)


def _stored_form(code: str) -> str:
    """What is stored of a recovery code: a keyed hash (16 hex digits, django-otp's column),
    so the database alone does not give the codes away."""
    return salted_hmac(RECOVERY_SALT, code, algorithm="sha256").hexdigest()[:16]


def _recovery_code_consumed(user: User, code: str) -> bool:
    stored = _stored_form(code)
    deleted, _ = StaticToken.objects.filter(device__user=user, token=stored).delete()
    return deleted > 0


def code_check(*, request: HttpRequest, user: User, code: str, context: PanelContext) -> Method:
    """Which kind of code `code` is, if it is right now; refuses with `CodeRefused` (counted
    as a failed sign-in and audited) or `SignInLocked` (nothing checked)."""
    if sign_in_locked(request, user):
        raise SignInLocked()
    code = _normalised(code)
    if _totp_matches(user, code):
        return Method.TOTP
    if _recovery_code_consumed(user, code):
        audit_person_action(user=user, context=context, action=PanelAction.MFA_RECOVERY_CODE_USE)
        return Method.RECOVERY_CODE
    user_login_failed.send(sender=__name__, credentials=_credentials(user), request=request)
    audit_person_action(
        user=user, context=context, action=PanelAction.MFA_CODE_FAIL, status_code=401
    )
    raise CodeRefused()


# --- Removing a factor (a current code first; every other session ends) ---


def _after_removal(user: User, context: PanelContext, keep_session_key: str | None) -> None:
    if not has_second_factor(user):
        StaticDevice.objects.filter(user=user).delete()
    person_sessions_end(
        user=user,
        reason=EndReason.FACTOR_REMOVED,
        context=context,
        keep_session_key=keep_session_key,
    )


def totp_remove(*, request: HttpRequest, user: User, code: str, context: PanelContext) -> None:
    code_check(request=request, user=user, code=code, context=context)
    with transaction.atomic():
        removed, _ = TOTPDevice.objects.filter(user=user).delete()
        if not removed:
            raise FactorNotFound()
        audit_person_action(user=user, context=context, action=PanelAction.MFA_TOTP_REMOVE)
        _after_removal(user, context, request.session.session_key)


def passkey_remove(
    *, request: HttpRequest, user: User, passkey_id: int, code: str, context: PanelContext
) -> None:
    if not Passkey.objects.filter(user=user, id=passkey_id).exists():
        raise FactorNotFound()
    code_check(request=request, user=user, code=code, context=context)
    with transaction.atomic():
        Passkey.objects.filter(user=user, id=passkey_id).delete()
        audit_person_action(user=user, context=context, action=PanelAction.MFA_PASSKEY_REMOVE)
        _after_removal(user, context, request.session.session_key)
