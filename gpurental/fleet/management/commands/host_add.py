from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from gpurental.fleet.models import GPUSource, Host
from gpurental.fleet.services import host_create, host_join_command
from gpurental.fleet.zones import UnknownZone, host_set_zone, zone_named


class Command(BaseCommand):
    help = (
        "Add a GPU host and print its join command (last line): run it, or deploy/host/install.sh "
        "with it, on that host. The token in it is shown only now (Rotate join token makes another)."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="the host's name: letters, digits, dashes and underscores")
        parser.add_argument(
            "--address",
            required=True,
            help="the address (IP or DNS name) where the host publishes instance ports to the gateways",
        )
        parser.add_argument(
            "--gpu-source",
            choices=GPUSource.values,
            default=GPUSource.NVML,
            help="nvml (real GPUs, the default) or simulated (tests, demos)",
        )

        parser.add_argument(
            "--zone",
            default="",
            help="the zone it is in (manage.py zone_add makes one); launches may ask for a zone",
        )

    def handle(self, *args, name, address, gpu_source, zone, **options):
        if Host.objects.filter(name=name).exists():
            raise CommandError(f"name: a host named {name!r} exists (rotate its token instead)")
        try:
            zone = zone_named(zone) if zone else None
        except UnknownZone as exc:
            raise CommandError(f"zone: {exc.message}") from None
        host = Host(name=name, address=address, gpu_source=gpu_source)
        try:
            host.full_clean(exclude=["token_hash"])
        except ValidationError as exc:
            raise CommandError(
                "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items())
            ) from None
        host, token = host_create(name=name, address=address, gpu_source=gpu_source)
        if zone is not None:
            host_set_zone(host=host, zone=zone)
        self.stdout.write(f"Host {host.name!r} added; its join command (shown only now):")
        self.stdout.write(host_join_command(host=host, token=token))
