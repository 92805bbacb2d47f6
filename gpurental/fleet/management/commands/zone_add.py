from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from gpurental.fleet.zones import zone_create


class Command(BaseCommand):
    help = "Add a zone (a failure domain) in a region; then host_add --zone puts hosts in it."

    def add_arguments(self, parser):
        parser.add_argument("name", help="the zone's name, e.g. cn-east-1a")
        parser.add_argument("--region", required=True, help="its region, e.g. cn-east-1")
        parser.add_argument("--label", default="", help="the name customers see")

    def handle(self, *args, name, region, label, **options):
        try:
            zone = zone_create(name=name, region=region, label=label)
        except ValidationError as exc:
            raise CommandError(
                "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items())
            ) from None
        self.stdout.write(f"Zone {zone.name!r} added in region {zone.region!r}")
