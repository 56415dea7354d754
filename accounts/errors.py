"""The errors account code refuses with; the API and the panel each answer them in one place."""

from gshost.errors import (
    InvalidInput,
    InvalidState,
    NotFound,
    NotPermitted,
    RateLimited,
    RefusedValue,
    Unavailable,
)


class KeyNotFound(NotFound):
    """The same for a key that never existed and another organization's."""

    default_message = "No such key in this organization."


class KeyRequestRefused(InvalidInput):
    """A key request the rules refuse; `field` names the form field at fault, if any."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ScopeExceedsPermissions(RefusedValue):
    """A person granting (or, by rotating, re-granting) scopes they do not hold."""

    code = "scope_exceeds_permissions"
    field = "scopes"

    def __init__(self, scopes: list[str]) -> None:
        super().__init__("You cannot grant scopes you do not hold: " + ", ".join(scopes))
        self.scopes = scopes


class KeyNotRotatable(InvalidState):
    default_message = "Only an active key that has not been rotated can be rotated."
    field = None


class KeyDeletionRefused(NotPermitted):
    """Only a key's creator, or a person holding every recognised scope on it, may delete it."""

    def __init__(self, scopes: list[str]) -> None:
        super().__init__(
            "Only the key's creator or a person holding all of its scopes can delete it; "
            "you do not hold: " + ", ".join(scopes)
        )
        self.scopes = scopes


class SelfRevocationOnly(NotPermitted):
    """Through the API a key revokes only itself; other keys are deleted in the panel."""

    def __init__(self, required_scope: str) -> None:
        super().__init__(
            "A key can revoke only itself; revoke other keys in the panel.",
            required_scope=required_scope,
            rule="self_revocation_only",
        )


class CodeRefused(InvalidInput):
    """A second-factor code (TOTP or recovery) that is wrong, already used, or expired."""

    code = "code_refused"
    default_message = "That code is not right, or it was already used. Try the current one."


class SignInLocked(RateLimited):
    """Too many failed sign-ins or codes for this account or address (§ sign-in throttling)."""

    code = "sign_in_locked"
    default_message = "Too many failed attempts: try again later."


class PasskeyRefused(InvalidInput):
    """A passkey answer that does not verify, or a passkey this person does not have."""

    code = "passkey_refused"
    default_message = "That passkey could not be verified."


class FactorNotFound(NotFound):
    default_message = "No such second factor."


class KeysUnavailable(Unavailable):
    """GitHub's public keys could not be fetched or read: a secret-scanning alert can be
    neither trusted nor refused (GitHub sends it again later)."""


class SignatureRefused(NotPermitted):
    """A secret-scanning alert with no signature, a signature that does not verify, or a key
    GitHub does not publish."""


class KeyIdsExhausted(Unavailable):
    """No unused key id was drawn in a few tries (each collides about once in 2^47)."""

    default_message = "Could not draw an unused key id; try again."


class SshKeyRefused(InvalidInput):
    """A public key the SSH key rules refuse (the message says which rule)."""

    code = "ssh_key_refused"


class SshKeyNotFound(NotFound):
    default_message = "No such SSH key."
