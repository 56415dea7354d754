"""Published test vectors for the secret-scanning signature: a fixed P-256 key pair, an alert
body and GitHub-style signature (base64 DER), checked three ways that do not share code:
the `openssl` command line, ECDSA verification written out here from the curve's arithmetic,
and our endpoint (which uses `cryptography`).
"""

import base64
import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.accounts.secret_scanning_kit import GITHUB_ROUTE, KeysServer, serve_keys

VECTOR_KEY_IDENTIFIER = "gshost-test-vector-1"
# Never used for anything but these vectors.
VECTOR_PRIVATE_KEY = """-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgcfwO3BS0I6LzVgQk
KPREizVwjnxc3MuXWEiL3jIRfpShRANCAATMQr0BVLNI+tfQUR8t+iTZ436v0UWt
8jIn5YkYIJvjTtWBYrrp52j9FnIf5qZ2RYUZEiklVKpZcmTm+1g855bR
-----END PRIVATE KEY-----
"""
VECTOR_PUBLIC_KEY = """-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEzEK9AVSzSPrX0FEfLfok2eN+r9FF
rfIyJ+WJGCCb407VgWK66edo/RZyH+amdkWFGRIpJVSqWXJk5vtYPOeW0Q==
-----END PUBLIC KEY-----
"""
VECTOR_TOKEN = "gsk_Vect0r01_TestVectorNotARealKeyOfAnyOrganizatio06xvg7"  # checksum valid
VECTOR_BODY = (
    b'[{"token":"gsk_Vect0r01_TestVectorNotARealKeyOfAnyOrganizatio06xvg7",'
    b'"type":"gshost_api_key","url":"https://github.com/octo/vectors/blob/main/config.env",'
    b'"source":"content"}]'
)
VECTOR_SIGNATURE = (
    "MEUCIHU8rud/MDSLwtWGZPH76/P01ymb1Gm1QRlkVswoaQeRAiEA"
    "/i9jKIXqbcsq6K6ZKYFbh6nxevQreUd6Yrn+OmOXwDQ="
)
VECTOR_TOKEN_HASH = "6df8774e7ae26ad9dbc370b854da3efd92b90a838995d99630b661d326fdb83b"

# NIST P-256 (FIPS 186-4, D.1.2.3).
P = 0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF
A = P - 3
B = 0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B
N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
G = (
    0x6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296,
    0x4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5,
)
SPKI_P256_PREFIX = bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d030107034200")

Point = tuple[int, int] | None  # None: the point at infinity


def add(p1: Point, p2: Point) -> Point:
    if p1 is None:
        return p2
    if p2 is None:
        return p1
    (x1, y1), (x2, y2) = p1, p2
    if x1 == x2 and (y1 + y2) % P == 0:
        return None
    if p1 == p2:
        slope = (3 * x1 * x1 + A) * pow(2 * y1, -1, P) % P
    else:
        slope = (y2 - y1) * pow(x2 - x1, -1, P) % P
    x3 = (slope * slope - x1 - x2) % P
    return x3, (slope * (x1 - x3) - y1) % P


def multiply(k: int, point: Point) -> Point:
    result: Point = None
    while k:
        if k & 1:
            result = add(result, point)
        point = add(point, point)
        k >>= 1
    return result


def pem_body(pem: str) -> bytes:
    return base64.b64decode("".join(line for line in pem.splitlines() if "-----" not in line))


def public_point(pem: str) -> tuple[int, int]:
    der = pem_body(pem)
    assert der[: len(SPKI_P256_PREFIX)] == SPKI_P256_PREFIX  # an uncompressed P-256 key
    point = der[len(SPKI_P256_PREFIX) :]
    assert point[0] == 4 and len(point) == 65
    x, y = int.from_bytes(point[1:33], "big"), int.from_bytes(point[33:], "big")
    assert (y * y - (x * x * x + A * x + B)) % P == 0, "not on the curve"
    return x, y


def der_integers(der: bytes) -> tuple[int, int]:
    """ECDSA-Sig-Value ::= SEQUENCE { r INTEGER, s INTEGER } (short lengths: P-256 fits)."""
    assert der[0] == 0x30 and der[1] == len(der) - 2
    values, at = [], 2
    for _ in range(2):
        assert der[at] == 0x02
        length = der[at + 1]
        values.append(int.from_bytes(der[at + 2 : at + 2 + length], "big"))
        at += 2 + length
    assert at == len(der)
    return values[0], values[1]


def ecdsa_verifies(public: tuple[int, int], body: bytes, signature_der: bytes) -> bool:
    r, s = der_integers(signature_der)
    if not (1 <= r < N and 1 <= s < N):
        return False
    e = int.from_bytes(hashlib.sha256(body).digest(), "big")
    w = pow(s, -1, N)
    point = add(multiply(e * w % N, G), multiply(r * w % N, public))
    return point is not None and point[0] % N == r


def test_the_signature_verifies_by_the_curve_arithmetic():
    signature = base64.b64decode(VECTOR_SIGNATURE)
    assert ecdsa_verifies(public_point(VECTOR_PUBLIC_KEY), VECTOR_BODY, signature)
    assert not ecdsa_verifies(public_point(VECTOR_PUBLIC_KEY), VECTOR_BODY + b" ", signature)


def test_the_private_key_is_the_public_keys_pair():
    der = pem_body(VECTOR_PRIVATE_KEY)
    # PKCS#8 wrapping an RFC 5915 ECPrivateKey: the 32-byte scalar follows `04 20`.
    at = der.index(bytes.fromhex("0420"), 30)
    d = int.from_bytes(der[at + 2 : at + 34], "big")
    assert multiply(d, G) == public_point(VECTOR_PUBLIC_KEY)


def test_the_token_hash_is_the_sha256_of_the_token():
    assert json.loads(VECTOR_BODY)[0]["token"] == VECTOR_TOKEN
    assert hashlib.sha256(VECTOR_TOKEN.encode()).hexdigest() == VECTOR_TOKEN_HASH


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_the_signature_verifies_with_openssl(tmp_path):
    (tmp_path / "public.pem").write_text(VECTOR_PUBLIC_KEY)
    (tmp_path / "signature.der").write_bytes(base64.b64decode(VECTOR_SIGNATURE))
    (tmp_path / "body").write_bytes(VECTOR_BODY)
    (tmp_path / "tampered").write_bytes(VECTOR_BODY.replace(b"octo", b"otco"))

    def verify(name: str) -> subprocess.CompletedProcess[str]:
        command = ["openssl", "dgst", "-sha256", "-verify", "public.pem"]
        command += ["-signature", "signature.der", name]
        return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=False)

    good, bad = verify("body"), verify("tampered")
    assert (good.returncode, good.stdout.strip()) == (0, "Verified OK")
    assert bad.returncode == 1


@pytest.fixture
def vector_keys(settings) -> Iterator[KeysServer]:
    for server in serve_keys(KeysServer()):
        server.document = {
            "public_keys": [
                {"key_identifier": "an-older-key", "key": "not checked", "is_current": False},
                {
                    "key_identifier": VECTOR_KEY_IDENTIFIER,
                    "key": VECTOR_PUBLIC_KEY,
                    "is_current": True,
                },
            ]
        }
        settings.SECRET_SCANNING_KEYS_URL = server.url
        yield server


def post_vector(client, body: bytes):
    return client.post(
        GITHUB_ROUTE,
        data=body,
        content_type="application/json",
        HTTP_GITHUB_PUBLIC_KEY_IDENTIFIER=VECTOR_KEY_IDENTIFIER,
        HTTP_GITHUB_PUBLIC_KEY_SIGNATURE=VECTOR_SIGNATURE,
    )


def test_the_endpoint_accepts_the_vector(db, client, vector_keys):
    response = post_vector(client, VECTOR_BODY)
    assert response.status_code == 200
    assert response.json() == [
        {"token_hash": VECTOR_TOKEN_HASH, "token_type": "gshost_api_key", "label": "false_positive"}
    ]


def test_the_endpoint_refuses_the_vector_with_one_byte_changed(db, client, vector_keys):
    assert post_vector(client, VECTOR_BODY.replace(b"octo", b"otco")).status_code == 401
