"""What acceptance does when fleet announces something about a host (``fleet.signals``)."""

from __future__ import annotations

from django.dispatch import receiver

from gpurental.acceptance.models import RunReason
from gpurental.acceptance.services import acceptance_on_join, acceptance_run_request
from gpurental.fleet.models import HostStatus
from gpurental.fleet.signals import heartbeat_recorded, host_back_from_maintenance


@receiver(heartbeat_recorded, dispatch_uid="acceptance.heartbeat")
def first_inventory_starts_the_benchmark(sender, host, inventory, now, **kwargs):
    """A joining host's first inventory: its benchmark can run now."""
    if inventory and host.status == HostStatus.ACCEPTANCE:
        acceptance_on_join(host=host, now=now)


@receiver(host_back_from_maintenance, dispatch_uid="acceptance.maintenance")
def back_from_maintenance_is_benchmarked(sender, host, actor, now, **kwargs):
    acceptance_run_request(host=host, reason=RunReason.MAINTENANCE, actor=actor, now=now)
