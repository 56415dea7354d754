"""The signing secret at rest: encrypted with rotatable keys, never stored in the clear."""

import pytest
from cryptography.fernet import Fernet

from tests.webhooks.webhook_fixtures import (
    create,
)
from webhooks.models import Webhook
from webhooks.secrets import decrypt_secret, encrypt_secret

OLD_KEY = Fernet.generate_key().decode()
NEW_KEY = Fernet.generate_key().decode()


def test_it_stores_the_secret_encrypted(admin):
    secret = create(admin).json()["signing_secret"]
    stored = Webhook.objects.get().encrypted_secret
    assert stored != secret
    assert secret not in stored
    assert secret.removeprefix("whsec_") not in stored


def test_it_decrypts_the_stored_secret_to_the_one_shown(admin):
    secret = create(admin).json()["signing_secret"]
    assert decrypt_secret(Webhook.objects.get().encrypted_secret) == secret


def test_it_still_decrypts_after_a_key_rotation_with_the_old_key_second(settings, admin):
    settings.WEBHOOK_SECRET_KEYS = [OLD_KEY]
    secret = create(admin).json()["signing_secret"]
    settings.WEBHOOK_SECRET_KEYS = [NEW_KEY, OLD_KEY]
    assert decrypt_secret(Webhook.objects.get().encrypted_secret) == secret


def test_it_encrypts_with_the_first_key(settings):
    settings.WEBHOOK_SECRET_KEYS = [NEW_KEY, OLD_KEY]
    token = encrypt_secret("whsec_x")
    settings.WEBHOOK_SECRET_KEYS = [NEW_KEY]
    assert decrypt_secret(token) == "whsec_x"


def test_it_cannot_decrypt_once_the_old_key_is_gone(settings, admin):
    settings.WEBHOOK_SECRET_KEYS = [OLD_KEY]
    create(admin)
    settings.WEBHOOK_SECRET_KEYS = [NEW_KEY]
    assert decrypt_secret(Webhook.objects.get().encrypted_secret) is None


@pytest.mark.parametrize("token", ["", "garbage", "gAAAAABnot-a-real-token", "ü"])
def test_it_answers_none_for_a_garbage_token(token):
    assert decrypt_secret(token) is None
