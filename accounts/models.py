from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, BaseUserManager, PermissionsMixin
from django.db import models
from django.db.models import Q
from django.utils import timezone

from accounts.scopes import CATALOGUE
from gshost.ids import new_id


def new_organization_id() -> str:
    return new_id("org")


class UserManager(BaseUserManager["User"]):
    use_in_migrations = True

    def create_user(self, email: str, password: str | None = None, **fields: Any) -> "User":
        user = self.model(email=self.normalize_email(email).lower(), **fields)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_superuser(self, email: str, password: str | None = None, **fields: Any) -> "User":
        fields.update(is_staff=True, is_superuser=True)
        return self.create_user(email, password, **fields)


class User(AbstractBaseUser, PermissionsMixin):
    """A person. Signs in to the panel with an email address."""

    email = models.EmailField(unique=True)
    is_active = models.BooleanField(default=True)
    is_staff = models.BooleanField(default=False)
    date_joined = models.DateTimeField(default=timezone.now)

    objects = UserManager()

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"

    def __str__(self) -> str:
        return self.email


class Organization(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=new_organization_id)
    slug = models.SlugField(unique=True, max_length=60)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)
    # Set by an owner: every member must have a second factor before using the panel.
    require_second_factor = models.BooleanField(default=False)

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    MEMBER = "member", "Member"


class Membership(models.Model):
    """A person's place in an organization. An owner holds every scope."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.MEMBER)
    scopes = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "organization"], name="one_membership_per_org")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.organization}"

    @property
    def held_scopes(self) -> frozenset[str]:
        if self.role == Role.OWNER:
            return CATALOGUE
        return frozenset(self.scopes) & CATALOGUE


class KeyStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    EXPIRED = "expired", "Expired"
    REVOKED = "revoked", "Revoked"


def key_status_at(
    moment: datetime, *, revoked_at: datetime | None, expires_at: datetime | None
) -> KeyStatus:
    """A key's status, for the stored key and its cached record alike."""
    if revoked_at is not None:
        return KeyStatus.REVOKED
    if expires_at is not None and expires_at <= moment:
        return KeyStatus.EXPIRED
    return KeyStatus.ACTIVE


class RevocationReason(models.TextChoices):
    """Why a key was revoked, when it was not simply a person's or a key's own request."""

    LEAKED = "leaked", "Leaked"


class LeakSource(models.TextChoices):
    """Who told us a key had leaked."""

    GITHUB_SECRET_SCANNING = "github_secret_scanning", "GitHub secret scanning"
    REPORT = "report", "Public report"


class ApiKey(models.Model):
    """An organization's API key. Only the secret's peppered hash is stored."""

    key_id = models.CharField(max_length=8, unique=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="keys")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True, default="")
    secret_hash = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    server_restrictions = models.JSONField(default=list, blank=True)
    allowed_ips = models.JSONField(default=list, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_used_at = models.DateTimeField(null=True, blank=True)
    last_used_ip = models.GenericIPAddressField(null=True, blank=True)
    # NULL, not "", means "not replaced": the unique-name constraint keys on it.
    replaced_by = models.CharField(max_length=8, null=True, blank=True)  # noqa: DJ001
    rotated_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Set only when the platform revoked the key because it was found in public.
    revoked_reason = models.CharField(
        max_length=20, choices=RevocationReason.choices, blank=True, default=""
    )
    leak_source = models.CharField(
        max_length=30, choices=LeakSource.choices, blank=True, default=""
    )
    leak_url = models.CharField(max_length=2000, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "name"],
                condition=Q(revoked_at__isnull=True, replaced_by__isnull=True),
                name="unique_live_key_name",
            )
        ]
        indexes = [models.Index(fields=["organization", "created_at"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.key_id})"

    def status_at(self, moment: datetime) -> KeyStatus:
        return key_status_at(moment, revoked_at=self.revoked_at, expires_at=self.expires_at)

    @property
    def status(self) -> KeyStatus:
        return self.status_at(timezone.now())

    @property
    def prefix(self) -> str:
        return f"gsk_{self.key_id}"


class Passkey(models.Model):
    """A WebAuthn credential a person registered; several per person, each named."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="passkeys")
    name = models.CharField(max_length=100)
    credential_id = models.BinaryField(max_length=1023)
    # The credential's id as base64url, unique: what a sign-in looks the passkey up by.
    lookup_id = models.CharField(max_length=1400, unique=True)
    public_key = models.BinaryField()
    sign_count = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} of {self.user}"


class SshKey(models.Model):
    """A public key a person added for SFTP (Account -> SSH keys). `public_key` is the key
    as OpenSSH writes it, `<type> <base64>`, without its comment."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="ssh_keys")
    name = models.CharField(max_length=100)
    key_type = models.CharField(max_length=40)
    public_key = models.TextField()
    fingerprint = models.CharField(max_length=60)  # SHA256:<base64 without padding>
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "fingerprint"], name="one_ssh_key_per_person")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.fingerprint}) of {self.user}"


class PanelSession(models.Model):
    """One signed-in panel session of a person, as Account -> Sessions lists it. The session
    itself lives in Django's session store; this row describes it."""

    session_key = models.CharField(max_length=40, unique=True)
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="panel_sessions")
    user_agent = models.CharField(max_length=500, blank=True, default="")
    ip = models.GenericIPAddressField(null=True, blank=True)
    signed_in_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"session of {self.user} since {self.signed_in_at:%Y-%m-%d %H:%M}"
