"""What rentals does when fleet announces something about a host (``fleet.signals``)."""

from __future__ import annotations

from django.dispatch import receiver

from gpurental.fleet.signals import heartbeat_recorded
from gpurental.rentals.services.disk import instances_disk_check
from gpurental.rentals.services.reconcile import host_containers_reconcile


@receiver(heartbeat_recorded, dispatch_uid="rentals.heartbeat")
def heartbeat_settles_instances(
    sender, host, containers, containers_listed_at, workspaces, now, **kwargs
):
    """The beat's container listing settles the host's instances; its workspace sizes are
    held to their plans' disk limits."""
    if containers is not None:
        host_containers_reconcile(
            host=host, containers=containers, observed_at=containers_listed_at, now=now
        )
    if workspaces is not None:
        instances_disk_check(host=host, usage=workspaces, now=now)
