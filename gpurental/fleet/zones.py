"""Zones and regions: failure domains that hosts belong to. A launch, a volume or an
elastic group may name zones; placement then takes only hosts in them
(``rentals.services.scheduling``), a volume's zone is its host's, and a group spreads its
replicas over its zones (``groups.services``)."""

from __future__ import annotations

from django.db import transaction
from django.utils.translation import gettext as _

from gpurental.accounts.models import User
from gpurental.accounts.services import audit_record
from gpurental.fleet.models import Host, Zone


class UnknownZone(ValueError):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def zone_named(name: str) -> Zone:
    """The zone called ``name``; UnknownZone naming the zones there are."""
    zone = Zone.objects.filter(name=str(name or "").strip()).first()
    if zone is None:
        known = ", ".join(Zone.objects.values_list("name", flat=True)) or _("none")
        raise UnknownZone(
            _("there is no zone %(name)r; zones: %(known)s") % {"name": name, "known": known}
        )
    return zone


@transaction.atomic
def zone_create(*, name: str, region: str, label: str = "", actor: User | None = None) -> Zone:
    zone = Zone(name=name, region=region, label=label)
    zone.full_clean()
    zone.save()
    audit_record(action="zone.create", actor=actor, obj=zone, changes={"region": region})
    return zone


@transaction.atomic
def host_set_zone(*, host: Host, zone: Zone | None, actor: User | None = None) -> Host:
    """Move a host into ``zone`` (None: no zone). Its instances and volumes stay where they
    are; new placements read the new zone."""
    before = host.zone.name if host.zone_id else None
    host.zone = zone
    host.save(update_fields=["zone"])
    audit_record(
        action="host.zone",
        actor=actor,
        obj=host,
        changes={"zone": [before, zone.name if zone else None]},
    )
    return host
