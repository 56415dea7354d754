"""Account -> SSH keys: a person adds public keys (listed with their fingerprint) and removes
them; only the accepted types and sizes are taken, and each change is audited."""

import base64

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from django.test import Client

from accounts.models import SshKey
from accounts.ssh_keys import fingerprint_of, parse_public_key, withdrawal_key_id
from audit.models import AuditRecord
from audit.services import PanelAction

PAGE = "/accounts/ssh-keys/"


def openssh_line(
    key: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey,
) -> str:
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return public.decode() + " someone@laptop"


def ed25519_line() -> str:
    return openssh_line(ed25519.Ed25519PrivateKey.generate())


def test_it_adds_a_key_and_lists_it_with_its_fingerprint(alice_client, alice):
    line = ed25519_line()
    response = alice_client.post(PAGE, {"name": "laptop", "public_key": line})
    assert response.status_code == 302
    key = SshKey.objects.get(user=alice.user)
    assert key.public_key == " ".join(line.split()[:2])  # the comment is not kept
    page = alice_client.get(PAGE).content.decode()
    assert "laptop" in page and key.fingerprint in page


def test_the_fingerprint_is_the_one_openssh_prints():
    line = ed25519_line()
    _, _, fingerprint = parse_public_key(line)
    assert fingerprint == fingerprint_of(base64.b64decode(line.split()[1]))
    assert fingerprint.startswith("SHA256:") and not fingerprint.endswith("=")


@pytest.mark.parametrize(
    "key",
    [
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP384R1()),
        rsa.generate_private_key(public_exponent=65537, key_size=2048),
    ],
    ids=["ecdsa-p256", "ecdsa-p384", "rsa-2048"],
)
def test_it_accepts_ecdsa_and_rsa_keys(alice_client, alice, key):
    alice_client.post(PAGE, {"name": "k", "public_key": openssh_line(key)})
    assert SshKey.objects.filter(user=alice.user).count() == 1


@pytest.mark.parametrize(
    "text",
    [
        openssh_line(rsa.generate_private_key(public_exponent=65537, key_size=1024)),
        "ssh-dss AAAAB3NzaC1kc3MAAACBAP1/U4EddRIpUt9KnC7s5Of2EbdSPO9EAMMeP4C2 x",
        "ssh-ed25519 not-base64!",
        "ssh-ed25519 " + ed25519_line().split()[1][:-8] + " truncated",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
    ],
    ids=["rsa-1024", "dsa", "not-base64", "truncated", "private-key"],
)
def test_it_refuses_other_keys(alice_client, alice, text):
    response = alice_client.post(PAGE, {"name": "k", "public_key": text})
    assert response.status_code == 400
    assert not SshKey.objects.filter(user=alice.user).exists()


def test_it_refuses_the_same_key_twice(alice_client, alice):
    line = ed25519_line()
    alice_client.post(PAGE, {"name": "one", "public_key": line})
    response = alice_client.post(PAGE, {"name": "two", "public_key": line})
    assert response.status_code == 400
    assert SshKey.objects.filter(user=alice.user).count() == 1


def test_it_removes_a_key_and_withdraws_its_sessions(alice_client, alice, monkeypatch):
    withdrawn = []
    monkeypatch.setattr(
        "accounts.ssh_keys.withdraw_access", lambda **given: withdrawn.append(given)
    )
    alice_client.post(PAGE, {"name": "laptop", "public_key": ed25519_line()})
    key = SshKey.objects.get(user=alice.user)
    response = alice_client.post(f"/accounts/ssh-keys/{key.id}/remove/")
    assert response.status_code == 302
    assert not SshKey.objects.filter(id=key.id).exists()
    assert withdrawn[0]["key_ids"] == [withdrawal_key_id(key.id)]


def test_a_person_cannot_remove_anothers_key(alice_client, bob):
    bob_browser = Client()
    bob_browser.force_login(bob.user)
    bob_browser.post(PAGE, {"name": "bobs", "public_key": ed25519_line()})
    key = SshKey.objects.get(user=bob.user)
    alice_client.post(f"/accounts/ssh-keys/{key.id}/remove/")
    assert SshKey.objects.filter(id=key.id).exists()


def test_adding_and_removing_are_audited(alice_client, alice):
    alice_client.post(PAGE, {"name": "laptop", "public_key": ed25519_line()})
    key = SshKey.objects.get(user=alice.user)
    alice_client.post(f"/accounts/ssh-keys/{key.id}/remove/")
    actions = list(
        AuditRecord.objects.filter(organization=alice.organization)
        .order_by("occurred_at")
        .values_list("action", flat=True)
    )
    assert actions[-2:] == [PanelAction.SSH_KEY_ADD, PanelAction.SSH_KEY_REMOVE]
