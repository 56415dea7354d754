"""`createorg SLUG --name NAME`: a new organization; prints its id alone."""

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_slug
from django.db import IntegrityError, transaction

from accounts.models import Organization
from accounts.selectors import organization_get_by_slug
from accounts.services import organization_create


class Command(BaseCommand):
    help = "Create an organization and print its id (org_...)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="Short unique name: letters, digits, '-' and '_'.")
        parser.add_argument("--name", required=True, help="Display name.")

    def handle(self, *args: Any, **options: Any) -> None:
        slug, name = _checked_slug(options["slug"]), _checked_name(options["name"])
        if organization_get_by_slug(slug) is not None:
            raise CommandError(f"An organization with slug {slug!r} already exists.")
        try:
            with transaction.atomic():
                organization = organization_create(slug=slug, name=name)
        except IntegrityError:  # created concurrently since the check above
            raise CommandError(f"An organization with slug {slug!r} already exists.") from None
        self.stdout.write(organization.id)


def _checked_slug(slug: str) -> str:
    max_length = Organization._meta.get_field("slug").max_length or 0
    try:
        validate_slug(slug)
    except ValidationError:
        raise CommandError(
            f"Invalid slug {slug!r}: use letters, digits, hyphens and underscores only."
        ) from None
    if len(slug) > max_length:
        raise CommandError(f"Invalid slug {slug!r}: at most {max_length} characters.")
    return slug


def _checked_name(name: str) -> str:
    max_length = Organization._meta.get_field("name").max_length or 0
    name = name.strip()
    if not name:
        raise CommandError("The organization needs a --name.")
    if len(name) > max_length:
        raise CommandError(f"The name is too long: at most {max_length} characters.")
    return name
