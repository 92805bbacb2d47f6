from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from gpurental.accounts.models import CUSTOMER_SCOPES, ApiKeyScope, User
from gpurental.accounts.services import ApiKeyRefused, api_key_create


class Command(BaseCommand):
    help = "Create an API key for a user and print it (last line). The key is shown only now."

    def add_arguments(self, parser):
        parser.add_argument("--user", required=True, help="the user's e-mail address")
        parser.add_argument("--name", default="cli", help="a name to recognise the key by")
        parser.add_argument(
            "--scopes",
            default=",".join(CUSTOMER_SCOPES),
            help=f"comma-separated, of {', '.join(ApiKeyScope.values)} (default: every customer scope)",
        )
        parser.add_argument("--expires-days", type=int, default=None, help="refused after N days")

    def handle(self, *args, user, name, scopes, expires_days, **options):
        owner = User.objects.filter(email__iexact=user).first()
        if owner is None:
            raise CommandError(f"--user: no user with e-mail {user!r}")
        if expires_days is not None and expires_days < 1:
            raise CommandError("--expires-days: at least 1")
        expires = timezone.now() + timedelta(days=expires_days) if expires_days else None
        try:
            key, raw = api_key_create(
                user=owner,
                name=name,
                scopes=[s.strip() for s in scopes.split(",") if s.strip()],
                expires_at=expires,
            )
        except ApiKeyRefused as exc:
            raise CommandError(f"--{exc.field.replace('_at', '-days')}: {exc.message}") from exc
        self.stdout.write(
            f"API key {key.name!r} ({key.prefix}) for {owner.email}; store it now, it is not shown again:"
        )
        self.stdout.write(raw)
