"""The registry's side of the platform's registry tokens: the certificate of the
control plane's signing key (PLATFORM_REGISTRY_TOKEN_KEY), and the lines of the
registry's config.yml that trust it; ``--create`` makes the key first."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from gpurental import registrytokens


class Command(BaseCommand):
    help = (
        "Print the certificate the platform's registry trusts for its tokens (write it to "
        "the registry's rootcertbundle), and its config.yml auth section."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--create", action="store_true", help="make the key at PLATFORM_REGISTRY_TOKEN_KEY"
        )
        parser.add_argument(
            "--cert-path",
            default="/etc/docker/registry/gpurental-token.pem",
            help="where the registry will read the certificate (for the config lines)",
        )

    def handle(self, *args, create: bool, cert_path: str, **options):
        path = settings.PLATFORM_REGISTRY_TOKEN_KEY
        if not path:
            raise CommandError("PLATFORM_REGISTRY_TOKEN_KEY is not set: the key's path")
        if create:
            if Path(path).exists():
                raise CommandError(f"{path} exists already; not overwritten")
            registrytokens.key_create(Path(path))
            self.stderr.write(f"made the signing key {path} (keep it as secret as SECRET_KEY)")
        try:
            key = registrytokens.key_load(path)
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read the key: {exc}") from exc
        self.stdout.write(registrytokens.certificate_pem(key).decode(), ending="")
        self.stderr.write(
            f"\n# config.yml of the registry, with the certificate above at {cert_path}:\n"
            + "\n".join(registrytokens.registry_config(Path(cert_path)))
        )
