from django.core.management.base import BaseCommand, CommandError

from gpurental.accounts.models import User
from gpurental.accounts.services import api_key_create


class Command(BaseCommand):
    help = "Create an API key for a user and print it (last line). The key is shown only now."

    def add_arguments(self, parser):
        parser.add_argument("--user", required=True, help="the user's e-mail address")
        parser.add_argument("--name", default="cli", help="a name to recognise the key by")

    def handle(self, *args, user, name, **options):
        owner = User.objects.filter(email__iexact=user).first()
        if owner is None:
            raise CommandError(f"--user: no user with e-mail {user!r}")
        key, raw = api_key_create(user=owner, name=name)
        self.stdout.write(
            f"API key {key.name!r} ({key.prefix}) for {owner.email}; store it now, it is not shown again:"
        )
        self.stdout.write(raw)
