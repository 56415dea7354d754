"""SSH keys: the public keys a person adds (Account -> SSH keys) to sign in to SFTP.

Accepted: `ssh-ed25519`, `ecdsa-sha2-nistp256/384/521` and `ssh-rsa` of at least 2,048 bits,
in OpenSSH's one-line form (`<type> <base64> [comment]`), parsed by `cryptography`. A key is
stored as `<type> <base64>` with its SHA256 fingerprint, as `ssh-keygen -l` prints it.
Removing a key ends the SFTP sessions it opened (a withdrawal naming the key).
"""

from __future__ import annotations

import base64
import binascii
import hashlib

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_ssh_public_key
from django.db import IntegrityError, transaction

from accounts.errors import SshKeyNotFound, SshKeyRefused
from accounts.models import SshKey, User
from accounts.person_audit import audit_person_action
from audit.services import PanelAction, PanelContext
from gshost.withdrawals import withdraw_access

MIN_RSA_BITS = 2048
MAX_KEY_TEXT = 16_384
MAX_KEYS_PER_PERSON = 50
ECDSA_TYPES = ("ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521")
KEY_TYPES = ("ssh-ed25519", *ECDSA_TYPES, "ssh-rsa")


def withdrawal_key_id(ssh_key_id: int) -> str:
    """How a withdrawal names an SSH key (API key ids never hold a colon)."""
    return f"ssh:{ssh_key_id}"


def parse_public_key(text: str) -> tuple[str, str, str]:
    """(type, `<type> <base64>`, fingerprint) of one OpenSSH public key line; SshKeyRefused
    for anything else."""
    words = text.strip().split()
    if len(text) > MAX_KEY_TEXT or len(words) < 2:
        raise SshKeyRefused("Paste one public key, as `ssh-ed25519 AAAA… comment`.")
    key_type, blob_text = words[0], words[1]
    if key_type not in KEY_TYPES:
        raise SshKeyRefused(f"The key type must be one of {', '.join(KEY_TYPES)}.")
    try:
        blob = base64.b64decode(blob_text, validate=True)
        key = load_ssh_public_key(f"{key_type} {blob_text}".encode("ascii"))
    except (binascii.Error, ValueError, UnicodeEncodeError, TypeError) as error:
        raise SshKeyRefused("That is not a valid public key.") from error
    if not _matches(key_type, key):
        raise SshKeyRefused("That is not a valid public key.")
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < MIN_RSA_BITS:
        raise SshKeyRefused(f"An RSA key must have at least {MIN_RSA_BITS} bits.")
    return key_type, f"{key_type} {blob_text}", fingerprint_of(blob)


def _matches(key_type: str, key: object) -> bool:
    if key_type == "ssh-ed25519":
        return isinstance(key, ed25519.Ed25519PublicKey)
    if key_type == "ssh-rsa":
        return isinstance(key, rsa.RSAPublicKey)
    return isinstance(key, ec.EllipticCurvePublicKey)


def fingerprint_of(blob: bytes) -> str:
    """`SHA256:…` of a key's wire form, as OpenSSH prints it."""
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode("ascii")
    return "SHA256:" + digest.rstrip("=")


def ssh_keys_of(*, user: User) -> list[SshKey]:
    return list(SshKey.objects.filter(user=user).order_by("created_at", "id"))


def ssh_key_add(*, user: User, name: str, public_key: str, context: PanelContext) -> SshKey:
    name = name.strip()
    if not name or len(name) > 100 or not name.isprintable():
        raise SshKeyRefused("Give the key a name of at most 100 characters.")
    key_type, normalized, fingerprint = parse_public_key(public_key)
    with transaction.atomic():
        if SshKey.objects.select_for_update().filter(user=user).count() >= MAX_KEYS_PER_PERSON:
            raise SshKeyRefused(f"You can add at most {MAX_KEYS_PER_PERSON} SSH keys.")
        try:
            with transaction.atomic():
                key = SshKey.objects.create(
                    user=user,
                    name=name,
                    key_type=key_type,
                    public_key=normalized,
                    fingerprint=fingerprint,
                )
        except IntegrityError:
            raise SshKeyRefused("You have already added this key.") from None
        audit_person_action(user=user, context=context, action=PanelAction.SSH_KEY_ADD)
    return key


def ssh_key_remove(*, user: User, ssh_key_id: int, context: PanelContext) -> None:
    with transaction.atomic():
        removed, _ = SshKey.objects.filter(user=user, id=ssh_key_id).delete()
        if not removed:
            raise SshKeyNotFound()
        audit_person_action(user=user, context=context, action=PanelAction.SSH_KEY_REMOVE)
        withdraw_access(reason="ssh_key_removed", key_ids=[withdrawal_key_id(ssh_key_id)])


def ssh_key_of_person(*, user: User, public_key: str) -> SshKey | None:
    """The person's key with this public key (`<type> <base64>`), if they added it."""
    try:
        _, normalized, fingerprint = parse_public_key(public_key)
    except SshKeyRefused:
        return None
    key = SshKey.objects.filter(user=user, fingerprint=fingerprint).first()
    return key if key is not None and key.public_key == normalized else None
