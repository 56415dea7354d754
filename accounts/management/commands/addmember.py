"""`addmember SLUG EMAIL --password PW [--owner | --scopes a,b]`: add or update a member."""

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_email
from django.db import transaction

from accounts import scopes as scope_catalogue
from accounts.models import Membership, Role
from accounts.selectors import organization_get_by_slug
from accounts.services import member_add


class Command(BaseCommand):
    help = (
        "Add a person to an organization, or update their role, scopes and password. "
        "An owner holds every scope; a member holds only the --scopes given."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="The organization's slug.")
        parser.add_argument("email", help="The person's email address (their login).")
        parser.add_argument("--password", required=True, help="Their panel password.")
        role = parser.add_mutually_exclusive_group()
        role.add_argument("--owner", action="store_true", help="Make them an owner.")
        role.add_argument(
            "--scopes",
            help="Comma-separated catalogue scopes for a member, e.g. servers:read,keys:read.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        email = _checked_email(options["email"])
        password: str = options["password"]
        if not password:
            raise CommandError("The password must not be empty.")
        if options["owner"] and options["scopes"] is not None:
            raise CommandError("Give --owner or --scopes, not both: an owner holds every scope.")
        member_scopes = parse_scopes(options["scopes"] or "")
        organization = organization_get_by_slug(options["slug"])
        if organization is None:
            raise CommandError(f"No organization with slug {options['slug']!r}.")
        with transaction.atomic():
            existed = Membership.objects.filter(
                organization=organization, user__email__iexact=email
            ).exists()
            membership = member_add(
                organization=organization,
                email=email,
                password=password,
                owner=options["owner"],
                member_scopes=member_scopes,
            )
        self.stdout.write(_confirmation(membership, updated=existed))


def parse_scopes(value: str) -> list[str]:
    """Comma-separated catalogue scopes; anything else is refused with the likely intent."""
    requested = scope_catalogue.normalize(value.split(","))
    unknown = scope_catalogue.unrecognized(requested)
    if unknown:
        raise CommandError(
            "Unknown "
            + ("scope " if len(unknown) == 1 else "scopes ")
            + "; ".join(_with_suggestion(scope) for scope in unknown)
            + ". Membership scopes must come from the catalogue: "
            + ", ".join(sorted(scope_catalogue.CATALOGUE))
            + "."
        )
    return requested


def _with_suggestion(scope: str) -> str:
    closest = scope_catalogue.closest_known(scope)
    return f"{scope!r} (did you mean {closest!r}?)" if closest else repr(scope)


def _checked_email(email: str) -> str:
    email = email.strip()
    try:
        validate_email(email)
    except ValidationError:
        raise CommandError(f"{email!r} is not a valid email address.") from None
    return email


def _confirmation(membership: Membership, *, updated: bool) -> str:
    email, slug = membership.user.email, membership.organization.slug
    if membership.role == Role.OWNER:
        held = "holds every scope"
    else:
        held = "scopes: " + (", ".join(membership.scopes) or "none")
    if updated:
        return f"Updated {email} in {slug}: {membership.role} ({held})."
    return f"Added {email} to {slug} as {membership.role} ({held})."
