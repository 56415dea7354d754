"""Passkeys (WebAuthn), with py_webauthn: registration and sign-in ceremonies.

The relying party is the panel's own origin, as the browser sees it (`Relying`); the challenge
of a ceremony is kept in the person's session between the options and the answer, and is used
once. Passkeys are registered as discoverable credentials, so one can sign in alone: the
browser offers the passkeys it holds for this site, and the answer names its credential id.
"""

import base64
import json
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone
from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    options_to_json,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from accounts.errors import PasskeyRefused
from accounts.models import Passkey, User
from accounts.person_audit import audit_person_action
from accounts.second_factor import recovery_codes_first
from audit.services import PanelAction, PanelContext

RP_NAME = "gshost"
MAX_NAME_LENGTH = 100


@dataclass(frozen=True)
class Relying:
    """The relying party: the host the panel is reached at, and its origin."""

    rp_id: str
    origin: str

    @classmethod
    def from_request(cls, request: HttpRequest) -> "Relying":
        host = request.get_host()  # checked against ALLOWED_HOSTS by Django
        origin = f"{request.scheme}://{host}"
        return cls(rp_id=host.rsplit(":", 1)[0].strip("[]"), origin=origin)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _descriptors(user: User) -> list[PublicKeyCredentialDescriptor]:
    ids = Passkey.objects.filter(user=user).values_list("credential_id", flat=True)
    return [PublicKeyCredentialDescriptor(id=bytes(credential_id)) for credential_id in ids]


def registration_options(user: User, relying: Relying) -> tuple[str, bytes]:
    """The options for `navigator.credentials.create`, as JSON, and their challenge."""
    options = generate_registration_options(
        rp_id=relying.rp_id,
        rp_name=RP_NAME,
        user_id=f"gshost-user-{user.pk}".encode(),
        user_name=user.email,
        exclude_credentials=_descriptors(user),
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.REQUIRED,
            user_verification=UserVerificationRequirement.PREFERRED,
        ),
    )
    return options_to_json(options), options.challenge


def passkey_register(
    *,
    user: User,
    name: str,
    credential: dict[str, Any],
    challenge: bytes,
    relying: Relying,
    context: PanelContext,
) -> list[str]:
    """Verify the browser's answer and keep the passkey. Returns new recovery codes when the
    person had none (shown once), else an empty list."""
    name = name.strip()[:MAX_NAME_LENGTH] or "Passkey"
    try:
        verified = verify_registration_response(
            credential=json.dumps(credential),
            expected_challenge=challenge,
            expected_rp_id=relying.rp_id,
            expected_origin=relying.origin,
        )
    except (WebAuthnException, ValueError, KeyError, TypeError) as refused:
        raise PasskeyRefused() from refused
    with transaction.atomic():
        lookup_id = _b64url(verified.credential_id)
        if Passkey.objects.filter(lookup_id=lookup_id).exists():
            raise PasskeyRefused("That passkey is already registered.")
        Passkey.objects.create(
            user=user,
            name=name,
            credential_id=verified.credential_id,
            lookup_id=lookup_id,
            public_key=verified.credential_public_key,
            sign_count=verified.sign_count,
        )
        audit_person_action(user=user, context=context, action=PanelAction.MFA_PASSKEY_ADD)
        return recovery_codes_first(user=user, context=context)


def authentication_options(relying: Relying, user: User | None) -> tuple[str, bytes]:
    """Options for `navigator.credentials.get`: the person's passkeys when the password is
    already checked (`user`), or any passkey of this site for a passkey-only sign-in."""
    options = generate_authentication_options(
        rp_id=relying.rp_id,
        allow_credentials=_descriptors(user) if user is not None else [],
        user_verification=UserVerificationRequirement.PREFERRED,
    )
    return options_to_json(options), options.challenge


def passkey_authenticate(
    *, credential: dict[str, Any], challenge: bytes, relying: Relying, user: User | None
) -> Passkey:
    """The passkey that answered, verified; with `user`, it must be one of theirs."""
    candidates = Passkey.objects.select_related("user")
    if user is not None:
        candidates = candidates.filter(user=user)
    passkey = candidates.filter(lookup_id=str(credential.get("id", ""))).first()
    if passkey is None or not passkey.user.is_active:
        raise PasskeyRefused()
    try:
        verified = verify_authentication_response(
            credential=json.dumps(credential),
            expected_challenge=challenge,
            expected_rp_id=relying.rp_id,
            expected_origin=relying.origin,
            credential_public_key=bytes(passkey.public_key),
            credential_current_sign_count=passkey.sign_count,
        )
    except (WebAuthnException, ValueError, KeyError, TypeError) as refused:
        raise PasskeyRefused() from refused
    Passkey.objects.filter(id=passkey.id).update(
        sign_count=verified.new_sign_count, last_used_at=timezone.now()
    )
    return passkey
