"""`createintegrationkey NAME --scopes S,... [--allowed-ips CIDR,...]`: a new integration key
for a billing system; prints the key once (it is never shown again)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from application.integration_keys import integration_key_create
from application.scopes import CATALOGUE
from gshost.errors import DomainError


def _listed(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


class Command(BaseCommand):
    help = "Create an integration key (gsi_...) for the Application API and print it once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="What the key is for, e.g. 'whmcs'.")
        parser.add_argument(
            "--scopes", required=True, help=f"Comma-separated, of: {', '.join(sorted(CATALOGUE))}"
        )
        parser.add_argument(
            "--allowed-ips", default="", help="Comma-separated CIDRs (default: anywhere)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            minted = integration_key_create(
                name=options["name"],
                scopes=_listed(options["scopes"]),
                allowed_ips=_listed(options["allowed_ips"]),
            )
        except DomainError as refused:
            raise CommandError(refused.message) from None
        self.stdout.write(minted.full_key)
