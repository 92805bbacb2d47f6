"""What rentals does when fleet announces something about a host (``fleet.signals``),
or accounts that a person's credentials were revoked (``accounts.credentials``)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q
from django.dispatch import receiver

from gpurental.accounts.credentials import credentials_revoked
from gpurental.fleet.signals import heartbeat_recorded
from gpurental.rentals.events import instances_wake
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.rentals.services.disk import instances_disk_check, volumes_size_check
from gpurental.rentals.services.reconcile import host_containers_reconcile


@receiver(heartbeat_recorded, dispatch_uid="rentals.heartbeat")
def heartbeat_settles_instances(
    sender, host, containers, containers_listed_at, workspaces, now, volumes=None, **kwargs
):
    """The beat's container listing settles the host's instances; its workspace sizes are
    held to their plans' disk limits."""
    if containers is not None:
        host_containers_reconcile(
            host=host, containers=containers, observed_at=containers_listed_at, now=now
        )
    if workspaces is not None:
        instances_disk_check(host=host, usage=workspaces, now=now)
    if volumes is not None:
        volumes_size_check(host=host, usage=volumes, now=now)


@receiver(credentials_revoked, dispatch_uid="rentals.credentials_revoked")
def revoked_credentials_close_connections(sender, user, **kwargs):
    """Once the revocation commits, wake every running instance the person may reach (their
    own, their teams'): the gateway and the SSH gateway ask again, see the person's new
    credentials generation, and close the websockets and SSH connections of the old one."""
    running = list(
        Instance.objects.filter(
            Q(user_id=user.pk) | Q(user__team__memberships__user_id=user.pk),
            status=InstanceStatus.RUNNING,
        )
        .values_list("pk", flat=True)
        .distinct()
    )
    if running:
        transaction.on_commit(lambda: instances_wake(running))
